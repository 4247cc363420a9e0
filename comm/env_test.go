package comm_test

import (
	"strings"
	"testing"

	"github.com/occl/occl/comm"
)

// clearLaunchEnv empties every variable DetectLaunch reads.
func clearLaunchEnv(t *testing.T) {
	for _, k := range []string{"OCCL_RANK", "OCCL_WORLD_SIZE", "OCCL_LOCAL_RANK", "OCCL_LOCAL_SIZE", "OCCL_UNIQUE_ID",
		"OCCL_RENDEZVOUS", "OCCL_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
		"MASTER_PORT", "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
		"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
		"SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_RANK", "PMI_SIZE",
		"MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_ID"} {
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
	if l.Launcher != "torchrun" || l.Rank != 3 || l.Size != 8 || l.LocalRank != 1 || l.LocalSize != 2 || l.ID.Addr != "10.0.0.5:29500" || !l.DerivedSecret {
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
	if l2.ID.Secret == l.ID.Secret {
		t.Fatal("derived secret ignores the job id")
	}
	t.Setenv("OCCL_SECRET", strings.Repeat("ab", 16))
	l3, _ := comm.DetectLaunch()
	if l3.DerivedSecret || l3.ID.Secret[0] != 0xab {
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
	if l.Launcher != "occl" || l.Rank != 0 || l.Size != 3 || l.ID != id || l.DerivedSecret {
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
