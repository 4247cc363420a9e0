package pyvenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunRetriesTakenPort runs a job whose rank 0 reports its MASTER_PORT
// in use the first time (a stand-in for the interpreter, a shell script):
// Run starts it again on another port, and it succeeds.
func TestRunRetriesTakenPort(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "fake-python")
	ports := filepath.Join(dir, "ports")
	body := "#!/bin/sh\n" +
		"echo \"$MASTER_PORT\" >> " + ports + "\n" +
		"if [ $(wc -l < " + ports + ") -eq 1 ]; then echo 'bind: Address already in use'; exit 1; fi\n" +
		"echo ok\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := Job{Python: script, NP: 1, Limit: 30 * time.Second}.Output(t)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ok") {
		t.Fatalf("output %q", out)
	}
	b, err := os.ReadFile(ports)
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Fields(string(b)); len(p) != 2 {
		t.Fatalf("ran %d times (ports %v), want 2", len(p), p)
	}
}

// TestRunKeepsOtherFailures: a rank that fails for another reason is not
// run again.
func TestRunKeepsOtherFailures(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "fake-python")
	runs := filepath.Join(dir, "runs")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho x >> "+runs+"\necho boom; exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// KeepGoing: both ranks run to their end (by default the first to
	// fail stops the other, maybe before it starts).
	if _, err := (Job{Python: script, NP: 2, Limit: 30 * time.Second, KeepGoing: true}).Output(t); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err %v, want the rank's failure", err)
	}
	b, _ := os.ReadFile(runs)
	if n := strings.Count(string(b), "x"); n != 2 {
		t.Fatalf("%d processes started, want 2 (one run)", n)
	}
}
