//go:build linux && cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/clib"
	"github.com/occl/occl/transport/rdma"
)

// The tests build liboccl.so with the documented command and drive it from
// C programs compiled with the system's C compiler.

// lib is the library built for this test binary.
var lib = clib.Lib{Root: "..", Pattern: "liboccl"}

// buildLib builds liboccl.so and liboccl.h into a temporary directory, once
// per test binary, and returns the directory. It skips the test without a C
// compiler.
func buildLib(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the C ABI tests need a C compiler (apt-get install -y gcc)")
	}
	return lib.Dir(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	lib.Cleanup()
	os.Exit(code)
}

// cc compiles C sources against occl.h and liboccl.so into an executable.
func cc(t *testing.T, libDir, out string, args ...string) {
	t.Helper()
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", inc, "-I", libDir}, args...)
	all = append(all, "-o", out, "-L", libDir, "-loccl", "-Wl,-rpath,"+libDir, "-lpthread")
	if b, err := exec.Command("gcc", all...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(all, " "), err, b)
	}
}

var (
	// A prototype in occl.h: the return type, then the name.
	headerProto = regexp.MustCompile(`(?m)^(?:occlResult_t|const char\*) (occl\w+)\(`)
	// An exported function in liboccl.h.
	exportProto = regexp.MustCompile(`(?m)^extern \w+ (occl\w+)\(`)
)

func names(re *regexp.Regexp, file string, t *testing.T) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return out
}

// TestHeaderMatchesExports checks that the hand-written occl.h declares
// exactly the functions the library exports, with the same types: a C file
// that includes occl.h and the generated liboccl.h compiles only if every
// prototype agrees ("conflicting types" otherwise), and linking a reference
// to every function of occl.h proves the library defines it.
// TestForeignBuffers: every buffer the library is given is C memory, so
// the RDMA registration caches must not keep registrations of them.
func TestForeignBuffers(t *testing.T) {
	if !rdma.ForeignBuffers() {
		t.Fatal("the C library lets RDMA registration caches keep registrations of C memory")
	}
}

func TestHeaderMatchesExports(t *testing.T) {
	dir := buildLib(t)
	declared := names(headerProto, "include/occl.h", t)
	exported := names(exportProto, filepath.Join(dir, "liboccl.h"), t)
	if len(declared) < 40 {
		t.Fatalf("found only %d prototypes in occl.h: %v", len(declared), declared)
	}
	if !slices.Equal(declared, exported) {
		t.Fatalf("occl.h declares\n%v\nthe library exports\n%v", declared, exported)
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include \"occl.h\"\n#include \"liboccl.h\"\n\nstatic void (*const fns[])(void) = {\n")
	for _, n := range declared {
		fmt.Fprintf(&src, "  (void (*)(void))%s,\n", n)
	}
	src.WriteString("};\n\nint main(void) {\n  int v = 0;\n  if (occlGetVersion(&v) != occlSuccess || v != OCCL_VERSION_CODE) return 1;\n")
	src.WriteString("  printf(\"%d functions, version %d\\n\", (int)(sizeof fns / sizeof fns[0]), v);\n  return 0;\n}\n")
	tmp := t.TempDir()
	file := filepath.Join(tmp, "both.c")
	if err := os.WriteFile(file, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "both")
	cc(t, dir, bin, "-pedantic", file)
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestHeaderCompileCommand compiles and runs a program with the command
// occl.h gives (cc -I cgo/include prog.c -L build -loccl ...), word for
// word, in a directory laid out as it says: the header in cgo/include and
// the library in build.
func TestHeaderCompileCommand(t *testing.T) {
	dir := buildLib(t)
	b, err := os.ReadFile("include/occl.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ \*\s+(cc .*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("occl.h gives no cc command")
	}
	inc, err := filepath.Abs("include")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	prog := "#include \"occl.h\"\nint main(void) {\n  int v = 0;\n  return occlGetVersion(&v) != occlSuccess || v != OCCL_VERSION_CODE;\n}\n"
	if err := errors.Join(os.Mkdir(filepath.Join(work, "cgo"), 0o755), os.Symlink(inc, filepath.Join(work, "cgo", "include")),
		os.Symlink(dir, filepath.Join(work, "build")), os.WriteFile(filepath.Join(work, "prog.c"), []byte(prog), 0o644)); err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(os.Expand(string(m[1]), func(v string) string { return map[string]string{"PWD": work}[v] }))
	if _, err := exec.LookPath(args[0]); err != nil {
		args[0] = "gcc" // buildLib found it
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", m[1], err, out)
	}
	if out, err := exec.Command(filepath.Join(work, "a.out")).CombinedOutput(); err != nil {
		t.Fatalf("the program built with %s: %v\n%s", m[1], err, out)
	}
}

// TestInProcess runs testdata/inprocess.c: one thread driving every rank
// with groups, one thread per rank through every collective, type and
// non-blocking call while another thread queries, an abort, shrinks
// after an abort and on purpose, and a grow.
func TestInProcess(t *testing.T) {
	dir := buildLib(t)
	bin := filepath.Join(t.TempDir(), "inprocess")
	cc(t, dir, bin, "testdata/inprocess.c")
	for _, part := range []string{"single", "threads", "abort", "shrink", "grow"} {
		t.Run(part, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, part)
			tmp := t.TempDir()
			cmd.Env = append(os.Environ(), "OCCL_TIMEOUT=30s", "TMPDIR="+tmp)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(string(out), "inprocess "+part+": ok") {
				t.Fatalf("no success line:\n%s", out)
			}
			if part == "abort" {
				// Every rank of the failed communicator wrote its flight
				// record to the temporary directory.
				dumps, _ := filepath.Glob(filepath.Join(tmp, "occl-flight-*-rank-*.json"))
				if len(dumps) != 4 || !strings.Contains(string(out), "flight record written") {
					t.Fatalf("flight records %q after the abort:\n%s", dumps, out)
				}
			}
		})
	}
}

// TestBadHandles passes handles that are not communicators or requests:
// made-up addresses, pointers to real memory, a request where a
// communicator is expected. Every call must return occlInvalidArgument with
// a message, without touching the memory.
func TestBadHandles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	runC(t, "bad", expectMacro+`
int main(void) {
  int n, x = 0;
  occlRequest_t req;
  static char mem[64];
  EXPECT(occlCommCount((occlComm_t)(void*)0x10, &n), occlInvalidArgument);
  EXPECT(occlCommCount((occlComm_t)(void*)mem, &n), occlInvalidArgument);
  EXPECT(occlCommCount((occlComm_t)(void*)~(size_t)7, &n), occlInvalidArgument);
  EXPECT(occlAllReduce(&x, &x, 1, occlInt32, occlSum, (occlComm_t)(void*)(mem + 8)), occlInvalidArgument);
  EXPECT(occlWait((occlRequest_t)(void*)mem), occlInvalidArgument);
  EXPECT(occlTest((occlRequest_t)(void*)0x1234, &n), occlInvalidArgument);
  occlUniqueId id;
  occlComm_t comm;
  EXPECT(occlGetUniqueId(&id), occlSuccess);
  EXPECT(occlCommInitRank(&comm, 1, id, 0), occlSuccess);
  EXPECT(occlAllReduceAsync(&x, &x, 1, occlInt32, occlSum, comm, &req), occlSuccess);
  EXPECT(occlCommCount((occlComm_t)(void*)req, &n), occlInvalidArgument);
  EXPECT(occlWait((occlRequest_t)(void*)comm), occlInvalidArgument);
  EXPECT(occlRequestOverlap(req), occlSuccess);
  EXPECT(occlRequestOverlap((occlRequest_t)(void*)comm), occlInvalidArgument);
  EXPECT(occlRequestOverlap(NULL), occlInvalidArgument);
  EXPECT(occlWait(req), occlSuccess);
  EXPECT(occlRequestOverlap(req), occlInvalidArgument);
  EXPECT(occlCommCount((occlComm_t)(void*)1, &n), occlInvalidArgument);
  EXPECT(occlAllReduce((void*)1, &x, 1, occlInt32, occlSum, comm), occlInvalidArgument);
  EXPECT(occlAllReduce(&x, (void*)4095, 1, occlInt32, occlSum, comm), occlInvalidArgument);
  EXPECT(occlAllReduce(&x, (void*)~(size_t)0, 1, occlInt32, occlSum, comm), occlInvalidArgument);
  EXPECT(occlAllReduce((void*)1, (void*)1, 0, occlInt32, occlSum, comm), occlSuccess);
  size_t cnt[1] = {1};
  const size_t* volatile bogus = (const size_t*)8;  // volatile: gcc would see through it
  EXPECT(occlAllToAllv(&x, bogus, cnt, &x, cnt, cnt, occlInt32, comm), occlInvalidArgument);
  EXPECT(occlCommDestroy(comm), occlSuccess);
  memset(&id, 'x', sizeof id);
  EXPECT(occlCommInitRank(&comm, 2, id, 0), occlInvalidArgument);
  strcpy(id.internal, "occl1:nonsense");
  EXPECT(occlCommInitRank(&comm, 2, id, 0), occlInvalidArgument);
  puts("ok");
  return 0;
}
`)
}

// expectMacro starts the C programs of runC: the headers and
// EXPECT(call, want), which fails main unless call returns want and, for
// a failure, occlGetLastError says something (which it prints).
const expectMacro = `#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "occl.h"
#define EXPECT(call, want) do { occlResult_t r_ = (call); const char* m_ = occlGetLastError(NULL); \
  if (r_ != (want) || ((want) != occlSuccess && m_[0] == 0)) { \
    fprintf(stderr, "%s: got %d (%s)\n", #call, r_, m_); return 1; } \
  if ((want) != occlSuccess) printf("%s: %s\n", #call, m_); } while (0)
`

// runC compiles the C program src against the library and runs it; it
// must exit 0 after printing "ok" last. It returns the program's output.
func runC(t *testing.T, name, src string) string {
	t.Helper()
	dir := buildLib(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, name+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, name)
	cc(t, dir, bin, file)
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
	return string(out)
}
