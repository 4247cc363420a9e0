package comm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strconv"
	"strings"
)

// Launch describes the job this process belongs to, as a launcher set it
// up in the environment.
type Launch struct {
	Launcher  string // "occl", "torchrun", "openmpi", "slurm" or "pmi"
	Rank      int
	Size      int
	LocalRank int // -1 if the launcher did not say
	LocalSize int // -1 if the launcher did not say
	ID        UniqueID
	// Unauthenticated is true when the environment holds no secret
	// (OCCL_UNIQUE_ID, OCCL_SECRET or OCCL_SECRET_FILE): ID.Secret is then
	// zero and the communicator runs with authentication off (see
	// UniqueID.Authenticated).
	Unauthenticated bool
}

// InitFromEnv joins the communicator of a job started by torchrun, mpirun
// (Open MPI), srun (Slurm), a PMI launcher or occl's own launcher, reading
// rank, size and rendezvous from the environment (see DetectLaunch).
func InitFromEnv(ctx context.Context, opts ...Option) (*Communicator, error) {
	l, err := DetectLaunch()
	if err != nil {
		return nil, err
	}
	return Init(ctx, l.ID, l.Rank, l.Size, opts...)
}

// DetectLaunch reads the job layout from the environment.
//
// Rank and size come from, in order of precedence: OCCL_RANK and
// OCCL_WORLD_SIZE (with OCCL_LOCAL_RANK); torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE; Open MPI's OMPI_COMM_WORLD_RANK, _SIZE,
// _LOCAL_RANK, _LOCAL_SIZE; Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID; PMI_RANK and PMI_SIZE.
//
// The rendezvous is OCCL_UNIQUE_ID if set (address and secret together).
// Otherwise the address is OCCL_RENDEZVOUS (host:port), else
// MASTER_ADDR:MASTER_PORT (under torchrun, whose own store holds
// MASTER_PORT, occl uses MASTER_PORT+1), else for Slurm the first node of
// the allocation and for single-host Open MPI or PMI jobs 127.0.0.1, with a
// port derived from the job id.
//
// The secret is OCCL_SECRET (32 hex digits), else read from the file
// OCCL_SECRET_FILE (32 hex digits, or at least 16 bytes of any content,
// hashed), for example on a filesystem the job's hosts share and other
// users cannot read. None of the supported launchers exports a secret of
// its own, and nothing computable from the environment is secret (under
// torchrun every variable is known to whoever can reach the rendezvous), so
// without either the secret is zero, authentication is off, and rank 0
// says so at WARN level.
func DetectLaunch() (Launch, error) {
	l := Launch{LocalRank: -1, LocalSize: -1}
	get := os.Getenv
	atoi := func(name string) (int, bool, error) {
		v := get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, true, fmt.Errorf("occl: %s=%q is not an integer", name, v)
		}
		return n, true, nil
	}
	type source struct {
		name                     string
		rank, size, lrank, lsize string
	}
	sources := []source{
		{"occl", "OCCL_RANK", "OCCL_WORLD_SIZE", "OCCL_LOCAL_RANK", "OCCL_LOCAL_SIZE"},
		{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
		{"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	}
	found := false
	for _, s := range sources {
		r, okR, err := atoi(s.rank)
		if err != nil {
			return l, err
		}
		n, okN, err := atoi(s.size)
		if err != nil {
			return l, err
		}
		if !okR || !okN {
			continue
		}
		l.Launcher, l.Rank, l.Size, found = s.name, r, n, true
		if v, ok, _ := atoi(s.lrank); ok {
			l.LocalRank = v
		}
		if v, ok, _ := atoi(s.lsize); ok {
			l.LocalSize = v
		}
		break
	}
	if !found {
		return l, fmt.Errorf("occl: no launcher environment found: set OCCL_RANK and OCCL_WORLD_SIZE, or run under torchrun, mpirun, srun or a PMI launcher")
	}
	if l.Size < 1 || l.Rank < 0 || l.Rank >= l.Size {
		return l, fmt.Errorf("occl: %s environment gives rank %d of size %d", l.Launcher, l.Rank, l.Size)
	}

	if v := get("OCCL_UNIQUE_ID"); v != "" {
		id, err := ParseUniqueID(v)
		if err != nil {
			return l, err
		}
		l.ID = id
		l.Unauthenticated = !id.Authenticated()
		return l, nil
	}
	addr, err := rendezvousAddr(l)
	if err != nil {
		return l, err
	}
	l.ID.Addr = addr
	switch v, file := get("OCCL_SECRET"), get("OCCL_SECRET_FILE"); {
	case v != "":
		b, err := hex.DecodeString(strings.TrimSpace(v))
		if err != nil || len(b) != len(l.ID.Secret) {
			return l, fmt.Errorf("occl: OCCL_SECRET must be %d hex digits", 2*len(l.ID.Secret))
		}
		copy(l.ID.Secret[:], b)
	case file != "":
		if l.ID.Secret, err = readSecretFile(file); err != nil {
			return l, err
		}
	default:
		l.Unauthenticated = true
	}
	if l.ID.Secret == ([16]byte{}) {
		l.Unauthenticated = true
	}
	return l, nil
}

// readSecretFile reads the secret in path: 32 hex digits, or any content
// of at least 16 bytes, hashed.
func readSecretFile(path string) ([16]byte, error) {
	var s [16]byte
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("occl: OCCL_SECRET_FILE: %w", err)
	}
	if h, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(h) == len(s) {
		copy(s[:], h)
		return s, nil
	}
	if len(b) < len(s) {
		return s, fmt.Errorf("occl: OCCL_SECRET_FILE %s holds %d bytes; it needs 32 hex digits or at least %d bytes", path, len(b), len(s))
	}
	sum := sha256.Sum256(append([]byte("occl-secret-file\x00"), b...))
	copy(s[:], sum[:])
	return s, nil
}

// rendezvousAddr picks the rank-0 address for a launch without
// OCCL_UNIQUE_ID.
func rendezvousAddr(l Launch) (string, error) {
	get := os.Getenv
	if v := get("OCCL_RENDEZVOUS"); v != "" {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return "", fmt.Errorf("occl: OCCL_RENDEZVOUS=%q: %w", v, err)
		}
		return v, nil
	}
	if host, port := get("MASTER_ADDR"), get("MASTER_PORT"); host != "" && port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 || p > 65535 {
			return "", fmt.Errorf("occl: MASTER_PORT=%q is not a port", port)
		}
		if get("TORCHELASTIC_RUN_ID") != "" {
			// torchrun's agent serves its TCPStore on MASTER_PORT.
			p++
		}
		return net.JoinHostPort(host, strconv.Itoa(p)), nil
	}
	port := strconv.Itoa(derivedPort())
	if l.Launcher == "slurm" {
		nodes := get("SLURM_STEP_NODELIST")
		if nodes == "" {
			nodes = get("SLURM_JOB_NODELIST")
		}
		if first := FirstNode(nodes); first != "" {
			return net.JoinHostPort(first, port), nil
		}
	}
	if l.LocalSize == l.Size || l.Size == 1 {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	return "", fmt.Errorf("occl: %s launch across hosts needs OCCL_RENDEZVOUS (host:port of rank 0), MASTER_ADDR and MASTER_PORT, or OCCL_UNIQUE_ID", l.Launcher)
}

// jobKey identifies the running job from whatever the launcher exports.
func jobKey() string {
	var parts []string
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
		"PMIX_NAMESPACE", "PMI_ID", "MASTER_ADDR", "MASTER_PORT"} {
		if v := os.Getenv(k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ";")
}

// derivedPort maps the job id to a port in [20000, 40000).
func derivedPort() int {
	h := fnv.New32a()
	h.Write([]byte(jobKey()))
	return 20000 + int(h.Sum32()%20000)
}

// FirstNode returns the first host of a Slurm node list such as
// "node[003-007,010],gpu01" (here "node003").
func FirstNode(list string) string {
	list = strings.TrimSpace(list)
	if list == "" {
		return ""
	}
	end := len(list)
	depth := 0
	for i, ch := range list {
		if ch == '[' {
			depth++
		} else if ch == ']' {
			depth--
		} else if ch == ',' && depth == 0 {
			end = i
			break
		}
	}
	first := list[:end]
	open := strings.IndexByte(first, '[')
	if open < 0 {
		return first
	}
	prefix, rng := first[:open], strings.TrimSuffix(first[open+1:], "]")
	rng, _, _ = strings.Cut(rng, ",")
	lo, _, _ := strings.Cut(rng, "-")
	return prefix + lo
}
