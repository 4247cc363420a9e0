//go:build linux

package pyvenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSourceKey: the key changes with a source file's contents, with a new
// source file and with the repository's path, and not with a file the
// build does not read.
func TestSourceKey(t *testing.T) {
	Require(t, "torch", "numpy", "setuptools")
	root := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(root string) string {
		t.Helper()
		k, err := sourceKey(root)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write("go.mod", "module x\n")
	write("a/a.go", "package a\n")
	write("cgo/python/setup.py", "pass\n")
	base := key(root)
	if again := key(root); again != base {
		t.Fatalf("key %s then %s for the same sources", base, again)
	}
	write("README.md", "words\n")
	write("bench/results/r.py", "print(1)\n")
	write("a/a_test.go", "package a\n")
	write("bench/peers/script.py", "print(1)\n")
	if k := key(root); k != base {
		t.Errorf("key changed with files the build does not read")
	}
	for _, c := range []struct{ name, body string }{
		{"a/a.go", "package a // changed\n"},
		{"a/a_amd64.s", "TEXT ·f(SB),4,$0\n"},
		{"cgo/default.pgo", "profile"},
		{"cgo/python/setup.py", "pass # changed\n"},
		{"cgo/python/occl/module.py", "x = 1\n"},
	} {
		before := key(root)
		write(c.name, c.body)
		if after := key(root); after == before {
			t.Errorf("key unchanged after writing %s", c.name)
		}
	}
	other := filepath.Join(t.TempDir(), "clone")
	if err := os.CopyFS(other, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	if key(other) == key(root) {
		t.Errorf("the same key for the same sources at another path (the build records its path)")
	}
}

// TestFindUsesTheCache: an environment whose build finished is returned
// without building and marked as the most recently used; prune keeps the
// most recently used finished environments and removes unfinished ones.
func TestFindUsesTheCache(t *testing.T) {
	Require(t, "torch", "numpy", "setuptools")
	cache := t.TempDir()
	t.Setenv(cacheEnv, cache)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	key, err := sourceKey(root)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	finished := func(name string, when time.Time) {
		t.Helper()
		dir := filepath.Join(cache, name)
		if err := os.MkdirAll(filepath.Join(dir, "env"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(dir, "done"), when, when); err != nil {
			t.Fatal(err)
		}
	}
	finished(key, old)
	// A file the cached environment holds and a build would not: find
	// must return the environment as it is, not make it again.
	marker := filepath.Join(cache, key, "env", "cached")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v := Venv{Root: "../.."}
	env, err := v.find()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, key, "env"); env != want {
		t.Fatalf("env %s, want the cached %s", env, want)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the cached environment was made again: %v", err)
	}
	fi, err := os.Stat(filepath.Join(cache, key, "done"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().After(old) {
		t.Errorf("a used environment keeps its old time %v", fi.ModTime())
	}

	// Four more finished ones, older than it, and one unfinished.
	for i, name := range []string{"k1", "k2", "k3", "k4"} {
		finished(name, old.Add(-time.Duration(i)*time.Minute))
	}
	if err := os.MkdirAll(filepath.Join(cache, "partial", "env"), 0o755); err != nil {
		t.Fatal(err)
	}
	prune(cache, 3)
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if e.IsDir() {
			left = append(left, e.Name())
		}
	}
	want := []string{key, "k1", "k2"}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("after prune: %v, want %v", left, want)
	}
}
