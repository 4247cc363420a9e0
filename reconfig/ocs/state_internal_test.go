package ocs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/occl/occl/topo"
)

func sampleState() *durable {
	return &durable{
		Ports:      16,
		Generation: 7,
		Connects:   []topo.Circuit{{A: 0, B: 5}, {A: 1, B: 7}},
		Drained:    []int{9},
		Requests: []requestRecord{
			{ID: "a", Target: targetHash([]topo.Circuit{{A: 5, B: 0}}), Result: ApplyResult{Generation: 6, Added: 1}},
			{ID: "b-2", Target: targetHash([]topo.Circuit{{A: 0, B: 5}, {A: 1, B: 7}}), Result: ApplyResult{Generation: 7, Added: 1, Unchanged: 1, SwitchingTime: 25 * time.Millisecond}},
			{ID: "c", Fenced: true},
		},
	}
}

func TestStateRoundTrip(t *testing.T) {
	d := sampleState()
	b, err := encodeState(d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := encodeState(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip changed the state:\n%s\n%s", b, b2)
	}
	path := filepath.Join(t.TempDir(), "ocs.state")
	if err := saveState(path, d, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := loadState(path)
	if err != nil || !ok || got.Generation != 7 || len(got.Connects) != 2 {
		t.Fatalf("loadState = %+v, %v, %v", got, ok, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if _, ok, err := loadState(filepath.Join(t.TempDir(), "missing")); ok || err != nil {
		t.Fatalf("missing state file: ok=%v err=%v", ok, err)
	}
}

func TestDecodeStateRejects(t *testing.T) {
	good, _ := encodeState(sampleState())
	cases := map[string]string{
		"empty":         ``,
		"not json":      `hello`,
		"wrong format":  strings.Replace(string(good), stateFormat, "other", 1),
		"wrong version": strings.Replace(string(good), `"version":1`, `"version":2`, 1),
		"trailing":      string(good) + `{}`,
		"unknown field": strings.Replace(string(good), `"ports":16`, `"ports":16,"x":1`, 1),
		"port range":    strings.Replace(string(good), `[1,7]`, `[1,16]`, 1),
		"self connect":  strings.Replace(string(good), `[1,7]`, `[7,7]`, 1),
		"port twice":    strings.Replace(string(good), `[1,7]`, `[1,5]`, 1),
		"triple":        strings.Replace(string(good), `[1,7]`, `[1,7,8]`, 1),
		"drained twice": strings.Replace(string(good), `"drained":[9]`, `"drained":[9,9]`, 1),
		"bad id":        strings.Replace(string(good), `"id":"a"`, `"id":"a b"`, 1),
		"same id":       strings.Replace(string(good), `"id":"b-2"`, `"id":"a"`, 1),
		"bad hash":      strings.Replace(string(good), `"target":"`, `"target":"zz`, 1),
		"negative time": strings.Replace(string(good), `"switching_ns":25000000`, `"switching_ns":-1`, 1),
		"one port":      strings.Replace(string(good), `"ports":16`, `"ports":1`, 1),
		"fenced result": strings.Replace(string(good), `"fenced":true`, `"fenced":true,"added":1`, 1),
		"fenced target": strings.Replace(string(good), `"switching_ns":25000000`, `"switching_ns":25000000,"fenced":true`, 1),
	}
	for name, data := range cases {
		if data == string(good) && name != "empty" {
			t.Fatalf("%s: replacement did not apply", name)
		}
		if _, err := decodeState([]byte(data)); err == nil {
			t.Errorf("%s: decodeState accepted %s", name, data)
		}
	}
}

// FuzzLoadState checks that the state decoder never panics and that what it
// accepts survives a round trip unchanged.
func FuzzLoadState(f *testing.F) {
	good, _ := encodeState(sampleState())
	f.Add(good)
	empty, _ := encodeState(&durable{Ports: 2})
	f.Add(empty)
	f.Add([]byte(`{"format":"occl-ocs-state","version":1,"ports":4,"generation":1,"connects":[[3,0]],"drained":[],"requests":[]}`))
	f.Add([]byte(`{"format":"occl-ocs-state","version":1,"ports":4,"connects":[[1]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeState(data)
		if err != nil {
			return
		}
		b, err := encodeState(d)
		if err != nil {
			t.Fatalf("encoding an accepted state: %v", err)
		}
		d2, err := decodeState(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		b2, err := encodeState(d2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", b, b2)
		}
	})
}

func TestRequestLogLRU(t *testing.T) {
	var d durable
	for _, id := range []string{"a", "b", "c"} {
		d.record(requestRecord{ID: id}, 3)
	}
	d.record(requestRecord{ID: "a"}, 3) // a becomes the most recent
	d.record(requestRecord{ID: "d"}, 3) // evicts b, the least recent
	var ids []string
	for _, r := range d.Requests {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "c,a,d" {
		t.Fatalf("request log = %v, want c,a,d", ids)
	}
}

// TestRecoveryInterceptor checks that a panic in a handler becomes
// codes.Internal instead of crashing the controller.
func TestRecoveryInterceptor(t *testing.T) {
	sw, _ := NewEmulated(4, 0)
	s, err := NewServer(sw, ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	unary, _ := s.interceptors()
	// Run the chain by hand: each interceptor calls the next, the last the handler.
	var call func(i int, ctx context.Context, req any) (any, error)
	info := &grpc.UnaryServerInfo{FullMethod: "/occl.ocs.v1.OCS/GetTopology", Server: nil}
	call = func(i int, ctx context.Context, req any) (any, error) {
		if i == len(unary) {
			panic("boom")
		}
		return unary[i](ctx, req, info, func(ctx context.Context, req any) (any, error) { return call(i+1, ctx, req) })
	}
	_, err = call(0, context.Background(), nil)
	if status.Code(err) != codes.Internal {
		t.Fatalf("panic in handler: %v, want Internal", err)
	}
}
