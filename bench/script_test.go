package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runScript runs the Python script at script (relative to this package)
// with python, from the repository root as its users run it, for at most
// limit, with extra environment (PYTHONDONTWRITEBYTECODE set, so that no
// bytecode lands in the tree), and returns its standard output, its
// standard error and its error.
func runScript(t *testing.T, python, script string, limit time.Duration, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	abs, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{abs}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// mustRunScript is runScript that fails t if the script fails, and
// returns its standard output.
func mustRunScript(t *testing.T, python, script string, limit time.Duration, env []string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runScript(t, python, script, limit, env, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(script), strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}
