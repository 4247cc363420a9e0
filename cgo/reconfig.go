package main

// #include "occl_cgo.h"
import "C"

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

// This file: reconfiguration and the all-to-all traffic monitor.

// controllers holds the OCS controller clients, one per address, token
// and TLS files,
// dialed on first use and kept for the life of the process.
var controllers = struct {
	sync.Mutex
	m map[string]*ocs.Client
}{m: map[string]*ocs.Client{}}

// controller returns the controller named by OCCL_OCS_ADDR, dialed with
// the token and TLS files of OCCL_OCS_TOKEN, OCCL_OCS_TLS_CA,
// OCCL_OCS_TLS_CERT and OCCL_OCS_TLS_KEY (see ocs.EnvOptions); nil if
// OCCL_OCS_ADDR is not set.
func controller(ctx context.Context) (reconfig.Controller, error) {
	addr := os.Getenv("OCCL_OCS_ADDR")
	if addr == "" {
		return nil, nil
	}
	key := strings.Join([]string{addr, os.Getenv(ocs.EnvToken), os.Getenv(ocs.EnvTLSCA),
		os.Getenv(ocs.EnvTLSCert), os.Getenv(ocs.EnvTLSKey)}, "\x00")
	controllers.Lock()
	defer controllers.Unlock()
	if c := controllers.m[key]; c != nil {
		return reconfig.OCS{Client: c}, nil
	}
	opts, err := ocs.EnvOptions()
	if err != nil {
		return nil, err
	}
	c, err := ocs.Dial(ctx, addr, opts...)
	if err != nil {
		return nil, err
	}
	controllers.m[key] = c
	return reconfig.OCS{Client: c}, nil
}

// cstring reads a NUL-terminated C string; "" for NULL.
func cstring(s C.occlInternalConstStr) string {
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(s)))
}

// occlCommReconfigure rewires comm to the target topology through the OCS controller at OCCL_OCS_ADDR, if set. See occl.h.
//
//export occlCommReconfigure
func occlCommReconfigure(comm C.occlComm_t, targetTopologyJSON C.occlInternalConstStr) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommReconfigure")
	defer k.end(&res)
	return k.reconfigure([]uintptr{commH}, targetTopologyJSON)
}

// occlCommReconfigureMany rewires comms[0..ncomms) (the communicator that spans the fabric and its sub-communicators) together. See occl.h.
//
//export occlCommReconfigureMany
func occlCommReconfigureMany(comms C.occlInternalConstComms, ncomms C.int, targetTopologyJSON C.occlInternalConstStr) (res C.occlResult_t) {
	k := begin("occlCommReconfigureMany")
	defer k.end(&res)
	if comms == nil || ncomms < 1 {
		return k.fail(resInvalidArgument, "comms is NULL or ncomms (%d) is not positive", int(ncomms))
	}
	// Read the handles as integers: see handle.
	hs := slices.Clone(unsafe.Slice((*uintptr)(unsafe.Pointer(comms)), int(ncomms)))
	return k.reconfigure(hs, targetTopologyJSON)
}

// reconfigure runs a reconfiguration of the communicators behind handles
// hs, the first one recording the call's error.
func (k *call) reconfigure(hs []uintptr, targetTopologyJSON C.occlInternalConstStr) C.occlResult_t {
	cs := make([]*comm.Communicator, len(hs))
	for i := len(hs) - 1; i >= 0; i-- {
		_, c, r := k.comm(hs[i])
		if r != resSuccess {
			return r
		}
		cs[i] = c
	}
	if targetTopologyJSON == nil {
		return k.fail(resInvalidArgument, "targetTopologyJSON is NULL")
	}
	target, err := topo.Parse([]byte(cstring(targetTopologyJSON)))
	if err != nil {
		return k.fail(resInvalidArgument, "targetTopologyJSON: %v", err)
	}
	if openGroup() != nil {
		return k.fail(resInvalidUsage, "not allowed inside a group")
	}
	ctx := context.Background()
	var opts []reconfig.Option
	ctl, err := controller(ctx)
	if err != nil {
		return k.fail(resSystemError, "OCS controller at OCCL_OCS_ADDR=%s: %v", os.Getenv("OCCL_OCS_ADDR"), err)
	}
	if ctl != nil {
		opts = append(opts, reconfig.WithController(ctl))
	}
	_, err = reconfig.Reconfigure(ctx, cs, target, opts...)
	return k.failErr(err)
}

// occlCommSetTrafficTag sets the tag later all-to-alls on comm are counted under. See occl.h.
//
//export occlCommSetTrafficTag
func occlCommSetTrafficTag(comm C.occlComm_t, tag C.occlInternalConstStr) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommSetTrafficTag")
	defer k.end(&res)
	ce, _, r := k.comm(commH)
	if r != resSuccess {
		return r
	}
	t := cstring(tag)
	ce.mu.Lock()
	ce.tag = t
	ce.mu.Unlock()
	return resSuccess
}

// occlCommTrafficMatrix gathers the all-to-all traffic matrix of tag as JSON into buf. See occl.h.
//
//export occlCommTrafficMatrix
func occlCommTrafficMatrix(comm C.occlComm_t, tag C.occlInternalConstStr, buf *C.char, length C.size_t, needed *C.size_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommTrafficMatrix")
	defer k.end(&res)
	if needed == nil {
		return k.fail(resInvalidArgument, "needed is NULL")
	}
	*needed = 0
	ce, c, r := k.comm(commH)
	if r != resSuccess {
		return r
	}
	if openGroup() != nil {
		return k.fail(resInvalidUsage, "not allowed inside a group")
	}
	t := cstring(tag)
	ce.mu.Lock()
	js, kept := ce.kept[t]
	delete(ce.kept, t)
	ce.mu.Unlock()
	if !kept {
		tm, err := c.TrafficMatrix(opCtx(ce), t)
		if err != nil {
			return k.failErr(err)
		}
		js = tm.JSON()
	}
	*needed = C.size_t(len(js) + 1)
	if buf == nil || uint64(length) < uint64(len(js)+1) {
		ce.mu.Lock()
		if ce.kept == nil {
			ce.kept = map[string][]byte{}
		}
		ce.kept[t] = js
		ce.mu.Unlock()
		return k.fail(resInvalidArgument, "buffer of %d bytes is too small: the traffic matrix needs %d (kept for the next call)", uint64(length), len(js)+1)
	}
	return k.writeString(js, buf, length, "the traffic matrix (kept for the next call)")
}

// writeString copies js and a NUL into buf, or fails naming what did not
// fit.
func (k *call) writeString(js []byte, buf *C.char, length C.size_t, what string) C.occlResult_t {
	if buf == nil || uint64(length) < uint64(len(js)+1) {
		return k.fail(resInvalidArgument, "buffer of %d bytes is too small: %s needs %d", uint64(length), what, len(js)+1)
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(js)+1)
	copy(out, js)
	out[len(js)] = 0
	return resSuccess
}

// occlCommTopology writes comm's current topology as JSON. See occl.h.
//
//export occlCommTopology
func occlCommTopology(comm C.occlComm_t, buf *C.char, length C.size_t, needed *C.size_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommTopology")
	defer k.end(&res)
	return k.commText(commH, buf, length, needed, "the topology", func(c *goComm) ([]byte, C.occlResult_t) {
		t := c.Topology()
		if t == nil {
			return nil, k.fail(resInvalidUsage, "the communicator has no topology (set OCCL_TOPO)")
		}
		return t.JSON(), resSuccess
	})
}

// goComm is the Go communicator, for the functions whose parameter comm
// hides the package.
type goComm = comm.Communicator

// commText is the body of the functions that write text about a
// communicator into the caller's buffer: it checks needed and the handle,
// gets the text from text, sets *needed to its size with the terminating
// NUL, and copies it if buf holds that much.
func (k *call) commText(commH uintptr, buf *C.char, length C.size_t, needed *C.size_t, what string,
	text func(c *goComm) ([]byte, C.occlResult_t)) C.occlResult_t {
	if needed == nil {
		return k.fail(resInvalidArgument, "needed is NULL")
	}
	*needed = 0
	_, c, r := k.comm(commH)
	if r != resSuccess {
		return r
	}
	js, r := text(c)
	if r != resSuccess {
		return r
	}
	*needed = C.size_t(len(js) + 1)
	return k.writeString(js, buf, length, what)
}

// occlPlanCircuits places circuits on a topology's free OCS ports for a demand. See occl.h.
//
//export occlPlanCircuits
func occlPlanCircuits(topologyJSON C.occlInternalConstStr, demand C.occlInternalConstDoubles, nranks C.int, buf *C.char, length C.size_t, needed *C.size_t) (res C.occlResult_t) {
	demandP := addr(demand) // first: see addr
	k := begin("occlPlanCircuits")
	defer k.end(&res)
	if needed == nil {
		return k.fail(resInvalidArgument, "needed is NULL")
	}
	*needed = 0
	if topologyJSON == nil {
		return k.fail(resInvalidArgument, "topologyJSON is NULL")
	}
	t, err := topo.Parse([]byte(cstring(topologyJSON)))
	if err != nil {
		return k.fail(resInvalidArgument, "topologyJSON: %v", err)
	}
	n := int(nranks)
	if n != len(t.Ranks) {
		return k.fail(resInvalidArgument, "nranks %d: the topology has %d ranks", n, len(t.Ranks))
	}
	if r := k.address("demand", demandP, uintptr(n*n)*8); r != resSuccess {
		return r
	}
	flat := unsafe.Slice((*float64)(pointer(demandP)), n*n)
	d := make([][]float64, n)
	for i := range d {
		d[i] = slices.Clone(flat[i*n : (i+1)*n])
		for j, b := range d[i] {
			if b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
				return k.fail(resInvalidArgument, "demand[%d][%d] = %v: want a finite number of bytes, not negative", i, j, b)
			}
		}
	}
	t.Circuits = nil
	if err := t.ConnectFor(d); err != nil {
		return k.fail(resInvalidArgument, "plan: %v", err)
	}
	js := t.JSON()
	*needed = C.size_t(len(js) + 1)
	return k.writeString(js, buf, length, "the planned topology")
}
