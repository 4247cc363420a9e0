// Package svgtest reads the SVG pictures occl's tools draw, for the tests
// that check them: whether the file is well-formed XML, its root element,
// the ids of its groups, and the text of its <text> and <title> elements
// and of its comments.
package svgtest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Doc is what Parse reads of an SVG file.
type Doc struct {
	// Root is the name of the root element ("svg" for an SVG file).
	Root string
	// GroupIDs are the id attributes of the <g> elements, in order.
	GroupIDs []string
	// Texts are the <text> elements' own text (not their children's),
	// trimmed, in order.
	Texts []string
	// Titles are the <title> elements' own text, as written, in order.
	Titles []string
	// Comments are the comments, trimmed, in order.
	Comments []string
}

// Parse reads data strictly as XML and returns what Doc holds, or the
// first error; a document whose root element is not <svg> is an error.
func Parse(data []byte) (Doc, error) {
	var d Doc
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	var own []*strings.Builder // each open element's own text
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return d, fmt.Errorf("not valid XML: %w", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if d.Root == "" {
				d.Root = tok.Name.Local
			}
			own = append(own, &strings.Builder{})
			if tok.Name.Local == "g" {
				for _, a := range tok.Attr {
					if a.Name.Local == "id" {
						d.GroupIDs = append(d.GroupIDs, a.Value)
					}
				}
			}
		case xml.CharData:
			if len(own) > 0 {
				own[len(own)-1].Write(tok)
			}
		case xml.EndElement:
			text := own[len(own)-1].String()
			own = own[:len(own)-1]
			switch tok.Name.Local {
			case "text":
				d.Texts = append(d.Texts, strings.TrimSpace(text))
			case "title":
				d.Titles = append(d.Titles, text)
			}
		case xml.Comment:
			d.Comments = append(d.Comments, strings.TrimSpace(string(tok)))
		}
	}
	if d.Root != "svg" {
		return d, fmt.Errorf("root element %q, want svg", d.Root)
	}
	return d, nil
}
