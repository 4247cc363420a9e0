package main

// #include "occl_cgo.h"
import "C"

import "bytes"

// This file: the flight record.

// occlCommFlightRecord writes comm's flight record as JSON into buf. See occl.h.
//
//export occlCommFlightRecord
func occlCommFlightRecord(comm C.occlComm_t, buf *C.char, length C.size_t, needed *C.size_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommFlightRecord", &res)
	defer k.end()
	if needed == nil {
		return k.fail(resInvalidArgument, "needed is NULL")
	}
	*needed = 0
	_, c, r := k.comm(commH)
	if r != resSuccess {
		return r
	}
	var b bytes.Buffer
	if err := c.DumpFlightRecord(&b); err != nil {
		return k.failErr(err)
	}
	js := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	*needed = C.size_t(len(js) + 1)
	return k.writeString(js, buf, length, "the flight record")
}
