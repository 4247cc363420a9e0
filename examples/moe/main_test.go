package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMoE runs two layers across 4 processes on a small emulated fabric
// and checks the report (every token is checked by the program itself).
func TestMoE(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "moe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-np", "4", "-layers", "3", "-bytes", "65536", "-compute", "5ms", "-switch-delay", "2ms",
		"-topo", "hosts=2x2,nics=host,ocs_ports=2,hbd=4GB/s,eps=1GB/s,ocs=1GB/s")
	cmd.Env = append(os.Environ(), "OCCL_RANK=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			rows++
		}
	}
	if rows != 3 || !strings.Contains(out.String(), "# all layers:") {
		t.Fatalf("want 3 layer rows and a summary:\n%s", out.String())
	}
}
