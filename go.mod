module github.com/occl/occl

go 1.26.0

require (
	github.com/valyala/bytebufferpool v1.0.0
	golang.org/x/sys v0.49.0
)
