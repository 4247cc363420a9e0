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
	k := begin("occlCommFlightRecord")
	defer k.end(&res)
	return k.commText(commH, buf, length, needed, "the flight record", func(c *goComm) ([]byte, C.occlResult_t) {
		var b bytes.Buffer
		if err := c.DumpFlightRecord(&b); err != nil {
			return nil, k.failErr(err)
		}
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), resSuccess
	})
}
