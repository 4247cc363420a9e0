// Command occl-trace works on the timelines occl writes when OCCL_TRACE is
// set.
//
// Usage:
//
//	occl-trace merge DIR [-o FILE]
//	occl-trace stats DIR
//
// merge reads the trace files every rank wrote into DIR (rank-<r>.json,
// and comm-<id>-rank-<r>.json for communicators made by Split) and writes
// one Chrome trace-event JSON file (standard output without -o) with one
// process row per rank, every rank's events moved onto rank 0's clock with
// the offset measured at bootstrap. Load it in Perfetto
// (https://ui.perfetto.dev) or chrome://tracing.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/occl/occl/trace"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: occl-trace merge DIR [-o FILE] | occl-trace stats DIR"

// run runs the command; it returns the exit code (2 on a usage error).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "merge" && args[0] != "stats" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("occl-trace "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var out *string
	if args[0] == "merge" {
		out = fs.String("o", "", "write the merged timeline to FILE (default: standard output)")
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	// Flags may come before or after DIR.
	var dirs []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		dirs = append(dirs, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(dirs) != 1 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if args[0] == "stats" {
		files, err := trace.ReadDir(dirs[0])
		if err != nil {
			fmt.Fprintf(stderr, "occl-trace: %v\n", err)
			return 1
		}
		printStats(stdout, trace.Stats(files))
		return 0
	}
	f, err := trace.MergeDir(dirs[0])
	if err != nil {
		fmt.Fprintf(stderr, "occl-trace: %v\n", err)
		return 1
	}
	if err := write(f, *out, stdout); err != nil {
		fmt.Fprintf(stderr, "occl-trace: %v\n", err)
		return 1
	}
	return 0
}

// printStats prints stats as a table, one line per operation and size.
func printStats(w io.Writer, stats []trace.OpStats) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tbytes\tops\tranks\tmedian us\tp90 us\tgap us\t")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", s.Op, s.Bytes, s.Count, s.Ranks, s.Median, s.P90, s.Gap)
	}
	tw.Flush()
}

func write(f trace.File, path string, stdout io.Writer) error {
	if path == "" {
		bw := bufio.NewWriter(stdout)
		if err := json.NewEncoder(bw).Encode(&f); err != nil {
			return err
		}
		return bw.Flush()
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(file)
	err = json.NewEncoder(bw).Encode(&f)
	if err == nil {
		err = bw.Flush()
	}
	if e := file.Close(); err == nil {
		err = e
	}
	return err
}
