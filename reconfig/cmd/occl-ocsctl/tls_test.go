package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/occl/occl/internal/testpki"
	"github.com/occl/occl/reconfig/ocs"
)

// TestTLSFlags runs the CLI against a controller that serves TLS and
// requires client certificates: with -tls-ca, -tls-cert and -tls-key (or
// the OCCL_OCS_TLS_* variables) it works; without the authority, without
// a client certificate or without TLS it fails.
func TestTLSFlags(t *testing.T) {
	p := testpki.New(t)
	cfg, err := ocs.ServerTLS(p.ServerCert, p.ServerKey, p.CA)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := ocs.NewEmulated(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ocs.NewServer(sw, ocs.ServerConfig{Token: token, GRPCOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background(), lis)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	addr := lis.Addr().String()
	t.Setenv("OCCL_OCS_TOKEN", token)
	t.Setenv("OCCL_OCS_ADDR", addr)
	for _, v := range []string{ocs.EnvTLSCA, ocs.EnvTLSCert, ocs.EnvTLSKey} {
		t.Setenv(v, "")
	}
	base := []string{"-timeout", "5s"}
	full := append(append([]string{}, base...), "-tls-ca", p.CA, "-tls-cert", p.ClientCert, "-tls-key", p.ClientKey)
	if code, out, errs := ctl(t, append(full, "apply", "-id", "tls1", "0-5")...); code != 0 || !strings.Contains(out, "generation 1") {
		t.Fatalf("with the authority and a client certificate: exit %d, %q %q", code, out, errs)
	}
	for _, tc := range []struct {
		name string
		want []string // what the error may say (a TLS 1.3 server refuses a client certificate after the client's side of the handshake is done, so the client may only see the connection closed)
		args []string
	}{
		{"another authority", []string{"certificate signed by unknown authority"},
			append(append([]string{}, base...), "-tls-ca", p.OtherCA, "-tls-cert", p.ClientCert, "-tls-key", p.ClientKey)},
		{"no client certificate", []string{"certificate required", "broken pipe", "connection reset"}, append(append([]string{}, base...), "-tls-ca", p.CA)},
		{"plaintext", []string{"server preface"}, base},
	} {
		code, out, errs := ctl(t, append(tc.args, "topology")...)
		if code != 1 || !slices.ContainsFunc(tc.want, func(w string) bool { return strings.Contains(errs, w) }) {
			t.Errorf("%s: exit %d, %q %q; want a failed call saying one of %q", tc.name, code, out, errs, tc.want)
		}
	}
	if code, _, errs := ctl(t, append(append([]string{}, base...), "-tls-cert", p.ClientCert, "topology")...); code != 2 || !strings.Contains(errs, "key") {
		t.Errorf("certificate without its key: exit %d, %q", code, errs)
	}
	t.Setenv(ocs.EnvTLSCA, p.CA)
	t.Setenv(ocs.EnvTLSCert, p.ClientCert)
	t.Setenv(ocs.EnvTLSKey, p.ClientKey)
	if code, out, errs := ctl(t, append(base, "topology")...); code != 0 || !strings.Contains(out, "generation 1") {
		t.Errorf("TLS from the environment: exit %d, %q %q", code, out, errs)
	}
}
