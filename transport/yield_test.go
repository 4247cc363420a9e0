package transport

import (
	"context"
	"testing"
)

func TestYields(t *testing.T) {
	bg := context.Background()
	if !Yields(bg) {
		t.Error("a plain context does not yield, want the default (yield)")
	}
	off := WithoutYield(bg)
	if Yields(off) {
		t.Error("WithoutYield context yields")
	}
	if !Yields(WithYield(off)) {
		t.Error("WithYield under WithoutYield does not yield")
	}
	if WithYield(bg) != bg {
		t.Error("WithYield on a context that already yields made a new context")
	}
	child, cancel := context.WithCancel(off)
	defer cancel()
	if Yields(child) {
		t.Error("a child of a WithoutYield context yields")
	}
}

func TestCoreYields(t *testing.T) {
	bg := context.Background()
	if CoreYields(bg) {
		t.Error("a plain context gives the core away")
	}
	child, cancel := context.WithCancel(WithCoreYield(WithoutYield(bg)))
	defer cancel()
	if !CoreYields(child) || Yields(child) {
		t.Error("a child of WithCoreYield(WithoutYield(...)) lost a setting")
	}
}
