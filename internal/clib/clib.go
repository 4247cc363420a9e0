//go:build linux

// Package clib builds liboccl.so, the C shared library of package
// github.com/occl/occl/cgo, for the tests that load it from C or Python.
package clib

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Build runs the documented build command, go build -buildmode=c-shared
// -o out ./cgo, in the repository at root; it also writes the generated
// header next to out. Under go test ./... the test binaries of several
// packages build the library at the same time; a lock file makes them take
// turns, so that a cold build cache (c-shared recompiles every package) is
// filled once and the others only link.
func Build(root, out string) error {
	TrackSources(root)
	if lock, err := os.OpenFile(filepath.Join(os.TempDir(), "occl-c-shared-build.lock"), os.O_CREATE|os.O_RDWR, 0o666); err == nil {
		defer lock.Close()
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX) == nil {
			defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		}
	}
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./cgo")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -buildmode=c-shared -o %s ./cgo: %v\n%s", out, err, b)
	}
	return nil
}

// Lib is liboccl.so, with its header liboccl.h, built at most once per
// test binary into a temporary directory. Set its fields before the first
// call to Dir, and call Cleanup from TestMain after the tests have run.
type Lib struct {
	// Root is the repository root, absolute or relative to the test's
	// working directory.
	Root string
	// Pattern names the temporary directory, as in os.MkdirTemp.
	Pattern string
	// Then, if not nil, runs once after a successful build with the
	// directory holding the library, to add files next to it; its error
	// fails Dir as a failed build does.
	Then func(dir string) error

	once sync.Once
	dir  string
	err  error
}

// Dir builds the library on its first call and returns the directory
// holding liboccl.so and liboccl.h. It fails t if the build failed.
func (l *Lib) Dir(t testing.TB) string {
	t.Helper()
	l.once.Do(func() {
		l.dir, l.err = os.MkdirTemp("", l.Pattern)
		if l.err != nil {
			return
		}
		l.err = Build(l.Root, filepath.Join(l.dir, "liboccl.so"))
		if l.err == nil && l.Then != nil {
			l.err = l.Then(l.dir)
		}
	})
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.dir
}

// Cleanup removes the temporary directory, if Dir created one.
func (l *Lib) Cleanup() {
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// TrackSources looks at every source file under root (see WalkSources),
// so that go test caches the calling test's result only as long as they
// are unchanged: go test keys a cached result on the files the test read
// or looked at, and a test that builds the library in a subprocess neither
// imports nor opens its sources.
func TrackSources(root string) {
	WalkSources(root, func(path string) { _, _ = os.Stat(path) })
}

// WalkSources calls fn, in lexical order, with the path of every file
// under root that a build of the library or the Python package reads: Go
// (with assembly and PGO profiles), C, C++, Python and their build files.
// It leaves out directories whose names start with a dot, and results.
func WalkSources(root string, fn func(path string)) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "results"):
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".s", ".pgo", ".c", ".h", ".cpp", ".py", ".toml", ".mod", ".sum":
			fn(path)
		}
		return nil
	})
}
