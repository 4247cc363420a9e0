//go:build linux

// Package pyvenv installs the occl Python package (cgo/python) the way its
// README tells users to, for the tests that run Python: a virtual
// environment made by Debian's /usr/bin/python3 with
// --system-site-packages (so that python3-torch is visible), and pip
// install --no-build-isolation --no-index, which builds liboccl.so and the
// torch backend into it. The build takes about a minute of CPU, so its
// result is kept in the user's cache directory, keyed by the sources and
// the tools that built it, and shared by every test binary that needs it
// (see Venv).
package pyvenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/internal/clib"
	"github.com/occl/occl/internal/freeport"
)

// System is the interpreter that has Debian's python3-torch and
// python3-numpy (a python3 earlier on PATH may not).
const System = "/usr/bin/python3"

// RequireEnv, set to 1, turns a missing Python, torch or NumPy into a test
// failure instead of a skip: CI sets it, since it installs them.
const RequireEnv = "OCCL_TEST_REQUIRE_PYTHON"

// Venv is the environment, found or made on the first call to Python.
//
// Environments live in $OCCL_PYVENV_CACHE, by default occl/pyvenv under
// the user's cache directory (os.UserCacheDir), one per key: a hash of
// the repository's path, its sources (clib.WalkSources) and the versions
// of Python, torch, NumPy, setuptools, Go and g++. Test binaries that run
// at the same time take turns through a lock file, so that the first
// builds and the others use its result; an environment whose build did
// not finish is made again. The cache keeps the most recently used
// cacheKeep environments.
type Venv struct {
	// Root is the repository root, relative to the test's directory.
	Root string

	once sync.Once
	dir  string
	err  error
}

// cacheKeep is how many environments the cache keeps (each is about
// 60 MB).
const cacheKeep = 3

// cacheEnv names the variable that overrides the cache's directory.
const cacheEnv = "OCCL_PYVENV_CACHE"

// Require skips t (fails it under OCCL_TEST_REQUIRE_PYTHON=1) unless
// /usr/bin/python3 imports every module.
func Require(t testing.TB, modules ...string) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv(RequireEnv) == "1" {
		skip = t.Fatalf
	}
	if _, err := os.Stat(System); err != nil {
		skip("%s not found: the Python tests need it (apt-get install -y python3-torch python3-venv python3-pip)", System)
		return
	}
	for _, m := range modules {
		if out, err := exec.Command(System, "-c", "import "+m).CombinedOutput(); err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			skip("%s cannot import %s (apt-get install -y python3-torch python3-numpy): %v: %s", System, m, err, lines[len(lines)-1])
			return
		}
	}
}

// Python returns the environment's interpreter, finding or making the
// environment on the first call. It requires torch and NumPy (see
// Require).
func (v *Venv) Python(t testing.TB) string {
	t.Helper()
	Require(t, "torch", "numpy", "ensurepip", "pip", "setuptools", "wheel")
	v.once.Do(func() { v.dir, v.err = v.find() })
	if v.err != nil {
		t.Fatal(v.err)
	}
	return filepath.Join(v.dir, "bin", "python")
}

// find returns the cached environment for the sources at v.Root, making
// it if the cache has none.
func (v *Venv) find() (string, error) {
	root, err := filepath.Abs(v.Root)
	if err != nil {
		return "", err
	}
	clib.TrackSources(root) // pip builds the library from them
	key, err := sourceKey(root)
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	dir := filepath.Join(cache, key)
	done := filepath.Join(dir, "done")
	env := filepath.Join(dir, "env")
	if _, err := os.Stat(done); err == nil {
		now := time.Now()
		_ = os.Chtimes(done, now, now) // most recently used
		return env, nil
	}
	if err := os.RemoveAll(dir); err != nil { // an unfinished build
		return "", err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := build(root, dir, env); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	prune(cache, cacheKeep)
	return env, nil
}

// cacheDir is where the environments are kept.
func cacheDir() (string, error) {
	if d := os.Getenv(cacheEnv); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the Python environment (set %s): %w", cacheEnv, err)
	}
	return filepath.Join(d, "occl", "pyvenv"), nil
}

// sourceKey hashes what the environment's build depends on: root's path
// (the build records it), the versions of the tools (toolVersions) and the
// contents of the sources the build reads (builtFrom).
func sourceKey(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "root %s\n%s", root, toolVersions())
	var walkErr error
	clib.WalkSources(root, func(path string) {
		rel, _ := filepath.Rel(root, path)
		if !builtFrom(rel) {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			walkErr = err
			return
		}
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
	})
	if walkErr != nil {
		return "", walkErr
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// pythonPackage is where the Python package's sources lie, relative to
// the repository's root.
const pythonPackage = "cgo/python"

// builtFrom reports whether the environment's build reads the source at
// rel (a path relative to the repository's root, one clib.WalkSources
// gives): every source but Go tests and Python scripts outside the
// package (benchmarks, examples), which the build does not read and whose
// edits would otherwise build the environment again.
func builtFrom(rel string) bool {
	rel = filepath.ToSlash(rel)
	switch {
	case strings.HasSuffix(rel, "_test.go"):
		return false
	case strings.HasSuffix(rel, ".py"):
		return strings.HasPrefix(rel, pythonPackage+"/")
	}
	return true
}

// toolVersions is what Python, torch, NumPy, setuptools, Go (the one the
// package's build finds: $OCCL_GO, else on PATH) and g++ say their
// versions are, asked once per process (importing torch takes seconds). A
// tool that cannot say adds its error instead: the build then reports
// what is missing.
var toolVersions = sync.OnceValue(func() string {
	goTool := os.Getenv("OCCL_GO")
	if goTool == "" {
		goTool = "go"
	}
	var b strings.Builder
	for _, tool := range [][]string{
		{System, "-c", "import sys, torch, numpy, setuptools; print(sys.version, torch.__version__, numpy.__version__, setuptools.__version__)"},
		{goTool, "version"},
		{"g++", "--version"},
	} {
		out, err := exec.Command(tool[0], tool[1:]...).Output()
		fmt.Fprintf(&b, "%s\n%s\n%v\n", tool[0], out, err)
	}
	return b.String()
})

// prune removes all but the keep most recently used finished environments
// in cache, and every unfinished one. Call it holding the lock.
func prune(cache string, keep int) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	type used struct {
		dir  string
		when time.Time
	}
	var finished []used
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(cache, e.Name())
		fi, err := os.Stat(filepath.Join(dir, "done"))
		if err != nil {
			os.RemoveAll(dir)
			continue
		}
		finished = append(finished, used{dir, fi.ModTime()})
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].when.After(finished[j].when) })
	for _, u := range finished[min(keep, len(finished)):] {
		os.RemoveAll(u.dir)
	}
}

// build makes the environment env, in dir, and installs the package from
// a copy of root's cgo/python into it.
func build(root, dir, env string) error {
	// Build from a copy, so that the build's files stay out of the tree.
	src := filepath.Join(dir, "src")
	if out, err := exec.Command("cp", "-r", filepath.Join(root, filepath.FromSlash(pythonPackage)), src).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the package: %v\n%s", err, out)
	}
	// Without what an earlier in-tree build left (ignored by git): the copy
	// gives every file the same age, so setuptools could take a stale
	// build/lib module for an up-to-date one.
	stale, _ := filepath.Glob(filepath.Join(src, "*.egg-info"))
	for _, p := range append(stale, filepath.Join(src, "build")) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "OCCL_SOURCE="+root, "PIP_DISABLE_PIP_VERSION_CHECK=1", "OCCL_LIB=")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run(System, "-m", "venv", "--system-site-packages", env); err != nil {
		return err
	}
	if err := run(filepath.Join(env, "bin", "pip"), "install", "--no-build-isolation", "--no-index", src); err != nil {
		return err
	}
	// The copy is not needed once installed.
	return os.RemoveAll(src)
}

// Job runs one Python script as NP processes with the variables torchrun
// gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1 and a free MASTER_PORT), one thread each.
type Job struct {
	Python string        // the interpreter (Venv.Python)
	NP     int           // processes
	Args   []string      // script and arguments
	Env    []string      // added to every process's environment
	Limit  time.Duration // for the whole job
	// KeepGoing lets the other ranks run on when one fails (to watch how
	// they fail); by default they are stopped, since they would wait for it.
	KeepGoing bool
}

// portTries is how many times Run starts a job whose rank 0 found its
// MASTER_PORT taken.
const portTries = 3

// Run runs the job and returns each rank's output and error. It may be
// called from any goroutine. The port is free when chosen, but another
// process may take it before rank 0's store binds it (tests run in
// parallel, and their connections take ports too): a job whose rank 0
// reports the address in use runs again on another port.
func (j Job) Run(t testing.TB) (outs []string, errs []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), j.Limit)
	defer cancel()
	for try := 1; ; try++ {
		port, err := freeport.On("127.0.0.1")
		if err != nil {
			errs = make([]error, j.NP)
			for r := range errs {
				errs[r] = err
			}
			return make([]string, j.NP), errs
		}
		outs, errs = j.runOn(ctx, port)
		if try == portTries || errs[0] == nil || !strings.Contains(outs[0], "Address already in use") || ctx.Err() != nil {
			return outs, errs
		}
	}
}

// runOn runs the job's processes with MASTER_PORT=port.
func (j Job) runOn(ctx context.Context, port int) (outs []string, errs []error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outs, errs = make([]string, j.NP), make([]error, j.NP)
	var wg sync.WaitGroup
	for r := range j.NP {
		cmd := exec.CommandContext(ctx, j.Python, j.Args...)
		cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "OCCL_LIB=", "OCCL_RANK=", "OCCL_WORLD_SIZE=")
		cmd.Env = append(cmd.Env, j.Env...)
		cmd.Env = append(cmd.Env, fmt.Sprintf("RANK=%d", r), fmt.Sprintf("LOCAL_RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", j.NP),
			fmt.Sprintf("LOCAL_WORLD_SIZE=%d", j.NP), "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port))
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(b), err
			if err != nil && !j.KeepGoing {
				cancel()
			}
		}()
	}
	wg.Wait()
	return outs, errs
}

// Output runs the job and returns every rank's output, concatenated, and
// an error naming the first rank that failed. It may be called from any
// goroutine.
func (j Job) Output(t testing.TB) (string, error) {
	t.Helper()
	outs, errs := j.Run(t)
	all := strings.Join(outs, "")
	for r, err := range errs {
		if err != nil {
			return all, fmt.Errorf("%v: rank %d: %v\n%s", j.Args, r, err, all)
		}
	}
	return all, nil
}

// MustRun runs the job, fails t if a rank failed, and returns every rank's
// output, concatenated. Call it from the test's goroutine (see Output).
func (j Job) MustRun(t testing.TB) string {
	t.Helper()
	all, err := j.Output(t)
	if err != nil {
		t.Fatal(err)
	}
	return all
}
