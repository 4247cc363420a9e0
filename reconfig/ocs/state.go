package ocs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
)

// The state file is JSON:
//
//	{"format":"occl-ocs-state","version":1,"ports":64,"generation":3,
//	 "connects":[[0,5],[1,7]],"drained":[9],
//	 "requests":[{"id":"phase-12","target":"<sha256 hex>","generation":3,
//	              "added":2,"removed":0,"unchanged":0,"switching_ns":25000000},
//	             {"id":"phase-13","fenced":true}]}
//
// requests is the request-id log, oldest first; target is the SHA-256 of the
// normalized target (see targetHash). A fenced record (only its id and
// "fenced") is a request id whose rollback was applied before it arrived.
const (
	stateFormat  = "occl-ocs-state"
	stateVersion = 1
	// maxStateBytes bounds what loadState reads.
	maxStateBytes = 64 << 20
	// maxPorts bounds the switches the controller accepts.
	maxPorts = 1 << 20
	// maxRequestLog bounds the request-id log.
	maxRequestLog = 1 << 16
)

// requestRecord remembers the result of one applied request id, or, when
// Fenced, that its rollback came first (see RollbackRequestID): the
// request id is refused if it arrives later.
type requestRecord struct {
	ID     string
	Target string // targetHash of the request's target; empty when Fenced
	Result ApplyResult
	Fenced bool
}

// durable is the controller state that survives restarts. A value is never
// modified once published: changes build a new one with clone.
type durable struct {
	Ports      int
	Generation uint64
	Connects   []topo.Circuit  // normalized, sorted
	Drained    []int           // sorted
	Requests   []requestRecord // oldest first
}

func (d durable) clone() durable {
	d.Connects = slices.Clone(d.Connects)
	d.Drained = slices.Clone(d.Drained)
	d.Requests = slices.Clone(d.Requests)
	return d
}

// lookup returns the record of request id.
func (d *durable) lookup(id string) (requestRecord, bool) {
	for i := len(d.Requests) - 1; i >= 0; i-- {
		if d.Requests[i].ID == id {
			return d.Requests[i], true
		}
	}
	return requestRecord{}, false
}

// record appends r to the request log as the most recent entry, dropping
// any older entry with the same id and the least recently used entries
// beyond limit.
func (d *durable) record(r requestRecord, limit int) {
	d.Requests = slices.DeleteFunc(d.Requests, func(x requestRecord) bool { return x.ID == r.ID })
	d.Requests = append(d.Requests, r)
	if n := len(d.Requests) - limit; n > 0 {
		d.Requests = slices.Delete(d.Requests, 0, n)
	}
}

// targetHash identifies a target set independently of order and of the
// orientation of each pair.
func targetHash(target []topo.Circuit) string {
	h := sha256.New()
	for _, c := range sortConnects(target) {
		fmt.Fprintf(h, "%d-%d,", c.A, c.B)
	}
	return hex.EncodeToString(h.Sum(nil))
}

type stateFile struct {
	Format     string         `json:"format"`
	Version    int            `json:"version"`
	Ports      int            `json:"ports"`
	Generation uint64         `json:"generation"`
	Connects   [][]int        `json:"connects"`
	Drained    []int          `json:"drained"`
	Requests   []stateRequest `json:"requests"`
}

type stateRequest struct {
	ID          string `json:"id"`
	Target      string `json:"target"`
	Generation  uint64 `json:"generation"`
	Added       int    `json:"added"`
	Removed     int    `json:"removed"`
	Unchanged   int    `json:"unchanged"`
	SwitchingNS int64  `json:"switching_ns"`
	Fenced      bool   `json:"fenced,omitempty"`
}

// encodeState serializes d.
func encodeState(d *durable) ([]byte, error) {
	f := stateFile{
		Format:     stateFormat,
		Version:    stateVersion,
		Ports:      d.Ports,
		Generation: d.Generation,
		Connects:   make([][]int, len(d.Connects)),
		Drained:    d.Drained,
		Requests:   make([]stateRequest, len(d.Requests)),
	}
	if f.Drained == nil {
		f.Drained = []int{}
	}
	for i, c := range d.Connects {
		f.Connects[i] = []int{c.A, c.B}
	}
	for i, r := range d.Requests {
		f.Requests[i] = stateRequest{
			ID: r.ID, Target: r.Target, Generation: r.Result.Generation,
			Added: r.Result.Added, Removed: r.Result.Removed, Unchanged: r.Result.Unchanged,
			SwitchingNS: int64(r.Result.SwitchingTime), Fenced: r.Fenced,
		}
	}
	b, err := json.Marshal(&f)
	if err != nil {
		return nil, fmt.Errorf("encoding state: %w", err)
	}
	return append(b, '\n'), nil
}

// decodeState parses and validates a state file. It accepts only what
// encodeState writes: the right format and version, pairs of distinct
// in-range ports with no port used twice, unique in-range drained ports and
// well-formed unique request records.
func decodeState(data []byte) (*durable, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f stateFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parsing state: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("parsing state: trailing data after the state object")
	}
	if f.Format != stateFormat {
		return nil, fmt.Errorf("not an OCS state file (format %q, want %q)", f.Format, stateFormat)
	}
	if f.Version != stateVersion {
		return nil, fmt.Errorf("state file version %d, this controller reads version %d", f.Version, stateVersion)
	}
	if f.Ports < 2 || f.Ports > maxPorts {
		return nil, fmt.Errorf("state: %d ports, want 2 to %d", f.Ports, maxPorts)
	}
	d := &durable{Ports: f.Ports, Generation: f.Generation}
	used := make(map[int]bool, 2*len(f.Connects))
	inRange := func(p int) bool { return p >= 0 && p < f.Ports }
	for i, pair := range f.Connects {
		if len(pair) != 2 {
			return nil, fmt.Errorf("state: connect %d has %d ports, want 2", i, len(pair))
		}
		c := topo.Circuit{A: pair[0], B: pair[1]}
		if !inRange(c.A) || !inRange(c.B) || c.A == c.B {
			return nil, fmt.Errorf("state: bad connect %v for %d ports", c, f.Ports)
		}
		if used[c.A] || used[c.B] {
			return nil, fmt.Errorf("state: connect %v uses a port twice", c)
		}
		used[c.A], used[c.B] = true, true
		d.Connects = append(d.Connects, c)
	}
	d.Connects = sortConnects(d.Connects)
	drained := make(map[int]bool, len(f.Drained))
	for _, p := range f.Drained {
		if !inRange(p) || drained[p] {
			return nil, fmt.Errorf("state: bad or repeated drained port %d", p)
		}
		drained[p] = true
	}
	d.Drained = sortedInts(f.Drained)
	if len(f.Requests) > maxRequestLog {
		return nil, fmt.Errorf("state: %d request records, more than %d", len(f.Requests), maxRequestLog)
	}
	ids := make(map[string]bool, len(f.Requests))
	for _, r := range f.Requests {
		if err := ocspb.ValidateRequestID(r.ID); err != nil {
			return nil, fmt.Errorf("state: request record: %w", err)
		}
		if ids[r.ID] {
			return nil, fmt.Errorf("state: request id %q recorded twice", r.ID)
		}
		ids[r.ID] = true
		if r.Fenced {
			if r != (stateRequest{ID: r.ID, Fenced: true}) {
				return nil, fmt.Errorf("state: fenced request %q has a target or a result", r.ID)
			}
			d.Requests = append(d.Requests, requestRecord{ID: r.ID, Fenced: true})
			continue
		}
		if len(r.Target) != 2*sha256.Size || strings.ToLower(r.Target) != r.Target {
			return nil, fmt.Errorf("state: request %q: bad target hash", r.ID)
		}
		if _, err := hex.DecodeString(r.Target); err != nil {
			return nil, fmt.Errorf("state: request %q: bad target hash", r.ID)
		}
		for _, n := range []int{r.Added, r.Removed, r.Unchanged} {
			if n < 0 || n > ocspb.MaxConnects {
				return nil, fmt.Errorf("state: request %q: bad count %d", r.ID, n)
			}
		}
		if r.SwitchingNS < 0 {
			return nil, fmt.Errorf("state: request %q: negative switching time", r.ID)
		}
		d.Requests = append(d.Requests, requestRecord{
			ID: r.ID, Target: r.Target,
			Result: ApplyResult{
				Generation: r.Generation, Added: r.Added, Removed: r.Removed, Unchanged: r.Unchanged,
				SwitchingTime: time.Duration(r.SwitchingNS),
			},
		})
	}
	return d, nil
}

// loadState reads the state file at path; ok is false when it does not exist.
func loadState(path string) (d *durable, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > maxStateBytes {
		return nil, false, fmt.Errorf("%s: larger than %d bytes", path, maxStateBytes)
	}
	d, err = decodeState(data)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return d, true, nil
}

// stateFS holds the file-system steps of a state write that come after the
// new content is written: the rename over the state file and the sync of
// its directory. Tests replace them to inject faults.
var stateFS = struct {
	rename  func(oldpath, newpath string) error
	syncDir func(dir string) error
}{os.Rename, syncDir}

// errStateKept marks a saveState error after which the state file holds
// the new state all the same: the directory sync failed after the rename
// and the previous state could not be put back.
var errStateKept = errors.New("the state file holds the new state")

// saveState replaces the state file at path with d atomically: it writes a
// temporary file in the same directory, syncs it, renames it over path and
// syncs the directory, so that a crash leaves either the old or the new
// state.
//
// On error the caller assumes the file holds the previous state. If the
// directory sync fails after the rename, the new state is already in place,
// so saveState writes prev back the same way (best effort: the directory
// sync may fail again, but the file then reads prev). If prev is nil, or
// putting it back fails, the error wraps errStateKept: the file holds d.
func saveState(path string, d, prev *durable) error {
	data, err := encodeState(d)
	if err != nil {
		return err
	}
	renamed, err := writeStateFile(path, data)
	if err == nil || !renamed {
		return err
	}
	if prev == nil {
		return fmt.Errorf("%w (%w)", err, errStateKept)
	}
	old, rerr := encodeState(prev)
	if rerr == nil {
		var restored bool
		restored, rerr = writeStateFile(path, old)
		if restored {
			return fmt.Errorf("%w (the previous state was written back)", err)
		}
	}
	return fmt.Errorf("%w; writing the previous state back failed: %v (%w)", err, rerr, errStateKept)
}

// writeStateFile replaces the file at path with data through a synced
// temporary file and a rename, then syncs the directory. renamed reports
// whether path holds data, which it does when only the directory sync
// failed.
func writeStateFile(path string, data []byte) (renamed bool, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("creating a temporary state file: %w", err)
	}
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return false, fmt.Errorf("writing the temporary state file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return false, fmt.Errorf("syncing the temporary state file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("closing the temporary state file: %w", err)
	}
	if err := stateFS.rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("renaming the temporary state file: %w", err)
	}
	return true, stateFS.syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s to sync it: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
