package comm_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// clearLaunchEnv empties every variable DetectLaunch reads.
func clearLaunchEnv(t *testing.T) {
	for _, k := range []string{"OCCL_RANK", "OCCL_WORLD_SIZE", "OCCL_LOCAL_RANK", "OCCL_LOCAL_SIZE", "OCCL_UNIQUE_ID",
		"OCCL_RENDEZVOUS", "OCCL_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
		"MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
		"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
		"SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_RANK", "PMI_SIZE",
		"MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_ID", "OCCL_SECRET_FILE"} {
		t.Setenv(k, "")
	}
}

func TestDetectTorchrun(t *testing.T) {
	clearLaunchEnv(t)
	t.Setenv("RANK", "3")
	t.Setenv("WORLD_SIZE", "8")
	t.Setenv("LOCAL_RANK", "1")
	t.Setenv("LOCAL_WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "10.0.0.5")
	t.Setenv("MASTER_PORT", "29500")
	l, err := comm.DetectLaunch()
	if err != nil {
		t.Fatal(err)
	}
	if l.Launcher != "torchrun" || l.Rank != 3 || l.Size != 8 || l.LocalRank != 1 || l.LocalSize != 2 || l.ID.Addr != "10.0.0.5:29500" || !l.Unauthenticated {
		t.Fatalf("%+v", l)
	}
	// Under torchelastic the agent's store owns MASTER_PORT.
	t.Setenv("TORCHELASTIC_RUN_ID", "job7")
	l2, err := comm.DetectLaunch()
	if err != nil {
		t.Fatal(err)
	}
	if l2.ID.Addr != "10.0.0.5:29501" {
		t.Fatalf("torchelastic address %s", l2.ID.Addr)
	}
	// Nothing in torchrun's environment is secret: no secret is made of it.
	if l.ID.Secret != ([16]byte{}) || l2.ID.Secret != ([16]byte{}) || !l2.Unauthenticated {
		t.Fatalf("a secret computed from public variables: %x, %x", l.ID.Secret, l2.ID.Secret)
	}
	t.Setenv("OCCL_SECRET", strings.Repeat("ab", 16))
	l3, _ := comm.DetectLaunch()
	if l3.Unauthenticated || l3.ID.Secret[0] != 0xab {
		t.Fatalf("OCCL_SECRET ignored: %+v", l3)
	}
}

func TestDetectOpenMPI(t *testing.T) {
	clearLaunchEnv(t)
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
	t.Setenv("OMPI_MCA_ess_base_jobid", "1234")
	l, err := comm.DetectLaunch()
	if err != nil {
		t.Fatal(err)
	}
	if l.Launcher != "openmpi" || l.Size != 4 || !strings.HasPrefix(l.ID.Addr, "127.0.0.1:") {
		t.Fatalf("%+v", l)
	}
	// Across hosts a rendezvous address is required.
	t.Setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("multi-host Open MPI launch without an address accepted")
	}
	t.Setenv("OCCL_RENDEZVOUS", "node1:7000")
	if l, err := comm.DetectLaunch(); err != nil || l.ID.Addr != "node1:7000" {
		t.Fatalf("%+v %v", l, err)
	}
}

func TestDetectSlurm(t *testing.T) {
	clearLaunchEnv(t)
	t.Setenv("SLURM_PROCID", "5")
	t.Setenv("SLURM_NTASKS", "16")
	t.Setenv("SLURM_LOCALID", "1")
	t.Setenv("SLURM_JOB_ID", "999")
	t.Setenv("SLURM_JOB_NODELIST", "gpu[007-010,012],login1")
	l, err := comm.DetectLaunch()
	if err != nil {
		t.Fatal(err)
	}
	if l.Launcher != "slurm" || l.Rank != 5 || l.Size != 16 || l.LocalRank != 1 || !strings.HasPrefix(l.ID.Addr, "gpu007:") {
		t.Fatalf("%+v", l)
	}
}

func TestDetectOverrides(t *testing.T) {
	clearLaunchEnv(t)
	id, _ := comm.NewUniqueIDAt("127.0.0.1:0")
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("OCCL_RANK", "0")
	t.Setenv("OCCL_WORLD_SIZE", "3")
	t.Setenv("OCCL_UNIQUE_ID", id.String())
	l, err := comm.DetectLaunch()
	if err != nil {
		t.Fatal(err)
	}
	if l.Launcher != "occl" || l.Rank != 0 || l.Size != 3 || l.ID != id || l.Unauthenticated {
		t.Fatalf("%+v", l)
	}
}

func TestDetectErrors(t *testing.T) {
	clearLaunchEnv(t)
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("empty environment accepted")
	}
	t.Setenv("OCCL_RANK", "x")
	t.Setenv("OCCL_WORLD_SIZE", "2")
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("non-numeric rank accepted")
	}
	t.Setenv("OCCL_RANK", "2")
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("rank == size accepted")
	}
}

func TestFirstNode(t *testing.T) {
	cases := map[string]string{
		"":                     "",
		"node1":                "node1",
		"node1,node2":          "node1",
		"gpu[003-007,010]":     "gpu003",
		"gpu[12,15-16],cpu[1]": "gpu12",
	}
	for in, want := range cases {
		if got := comm.FirstNode(in); got != want {
			t.Errorf("FirstNode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUniqueID(t *testing.T) {
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(id.Addr, ":0") {
		t.Fatalf("no port picked: %s", id.Addr)
	}
	back, err := comm.ParseUniqueID(id.String())
	if err != nil || back != id {
		t.Fatalf("round trip: %v %v", back, err)
	}
	other, _ := comm.NewUniqueIDAt("127.0.0.1:0")
	if other.Secret == id.Secret {
		t.Fatal("two ids share a secret")
	}
	for _, bad := range []string{"", "127.0.0.1:5/00", "occl1:nohost/" + strings.Repeat("0", 32), "occl1:1.2.3.4:5/zz", "occl1:1.2.3.4:5"} {
		if _, err := comm.ParseUniqueID(bad); err == nil {
			t.Errorf("ParseUniqueID(%q) accepted", bad)
		}
	}
}

func TestParseSize(t *testing.T) {
	cases := map[string]int{"8": 8, "64K": 64 << 10, "1M": 1 << 20, "2G": 2 << 30, "512KB": 512 << 10, "3m": 3 << 20}
	for in, want := range cases {
		if got, err := comm.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "K", "-1", "1X"} {
		if _, err := comm.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

// TestSecretFile: OCCL_SECRET_FILE gives the secret, as 32 hex digits or
// as at least 16 bytes of anything; a short or missing file is an error.
func TestSecretFile(t *testing.T) {
	clearLaunchEnv(t)
	t.Setenv("OCCL_RANK", "0")
	t.Setenv("OCCL_WORLD_SIZE", "2")
	t.Setenv("OCCL_RENDEZVOUS", "10.0.0.5:7000")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("OCCL_SECRET_FILE", write("hex", strings.Repeat("cd", 16)+"\n"))
	l, err := comm.DetectLaunch()
	if err != nil || l.Unauthenticated || l.ID.Secret != [16]byte(bytes.Repeat([]byte{0xcd}, 16)) {
		t.Fatalf("hex secret file: %+v %v", l, err)
	}
	t.Setenv("OCCL_SECRET_FILE", write("raw", "\x00\x01 random bytes from /dev/urandom"))
	l2, err := comm.DetectLaunch()
	if err != nil || l2.Unauthenticated || l2.ID.Secret == ([16]byte{}) || l2.ID.Secret == l.ID.Secret {
		t.Fatalf("raw secret file: %+v %v", l2, err)
	}
	t.Setenv("OCCL_SECRET_FILE", write("short", "tiny"))
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("a 4-byte secret file accepted")
	}
	t.Setenv("OCCL_SECRET_FILE", filepath.Join(dir, "missing"))
	if _, err := comm.DetectLaunch(); err == nil {
		t.Fatal("a missing secret file accepted")
	}
}

// TestAuthenticationOffWarns: a communicator without a secret runs with
// authentication off, and rank 0 (only) says so at WARN level, naming how
// to turn it on; with a secret nothing is said.
func TestAuthenticationOffWarns(t *testing.T) {
	for _, secret := range []bool{false, true} {
		id, err := comm.NewUniqueIDAt("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if !secret {
			id.Secret = [16]byte{}
		}
		if id.Authenticated() != secret {
			t.Fatalf("Authenticated() = %v for secret %x", id.Authenticated(), id.Secret)
		}
		comms, logs := initTwoLogged(t, id, slog.LevelWarn, comm.WithTransport(comm.TransportTCP))
		closeAll(comms)
		warned := strings.Count(logs[0].String(), "authentication is off")
		named := strings.Contains(logs[0].String(), "OCCL_SECRET") && strings.Contains(logs[0].String(), "OCCL_SECRET_FILE")
		switch {
		case !secret && (warned != 1 || !named):
			t.Fatalf("rank 0 without a secret logged:\n%s", logs[0].String())
		case secret && warned != 0:
			t.Fatalf("rank 0 with a secret logged:\n%s", logs[0].String())
		case strings.Contains(logs[1].String(), "authentication is off"):
			t.Fatalf("rank 1 warned too:\n%s", logs[1].String())
		}
	}
}

// TestUniqueIDSecret: NewUniqueID draws a fresh secret that survives its
// String form, and Init authenticates with it: a process with another
// secret is refused, the ranks holding it join.
func TestUniqueIDSecret(t *testing.T) {
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back, err := comm.ParseUniqueID(id.String())
	if err != nil || back != id || !id.Authenticated() || id.Secret == other.Secret {
		t.Fatalf("ids %v and %v, parsed back %v (%v)", id, other, back, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := make(chan error, 1)
	var c0 *comm.Communicator
	go func() {
		var err error
		c0, err = comm.Init(ctx, id, 0, 2, comm.WithTransport(comm.TransportTCP))
		root <- err
	}()
	intruder := id
	intruder.Secret = other.Secret
	if _, err := comm.Init(ctx, intruder, 1, 2, comm.WithTransport(comm.TransportTCP)); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("a rank with another secret: %v, want an authentication failure", err)
	}
	c1, err := comm.Init(ctx, back, 1, 2, comm.WithTransport(comm.TransportTCP))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-root; err != nil {
		t.Fatal(err)
	}
	closeAll([]*comm.Communicator{c0, c1})
}
