// Command occl-ocsd is the occl OCS controller daemon: it serves the
// occl.ocs.v1.OCS gRPC service (and the standard gRPC health service) for
// one optical circuit switch.
//
// Usage:
//
//	OCCL_OCS_TOKEN=secret occl-ocsd [-listen 127.0.0.1:0] [-ports 64] [-delay 25ms] [-state FILE]
//	    [-tls-cert FILE -tls-key FILE [-tls-ca FILE]] [-metrics-addr ADDR] [-v]
//
// It prints "occl-ocsd listening on HOST:PORT" on standard output once it
// serves, and stops gracefully on SIGTERM or SIGINT. Clients must send the
// token from OCCL_OCS_TOKEN as a bearer token (occl-ocsctl does); the daemon
// refuses to start without a token unless -no-auth is given. With -state the
// installed cross-connects, drained ports and recent request ids survive a
// restart (even kill -9): the restarted daemon puts the persisted
// cross-connects back on the switch.
//
// Without TLS the token travels in clear text: use it on loopback or a
// trusted management network only (the daemon warns when it listens
// elsewhere). With -tls-cert and -tls-key the daemon speaks TLS only, so
// no client can present the token over plaintext; with -tls-ca as well it
// requires client certificates signed by that authority (mutual TLS).
//
// The only driver today is the emulated switch (-driver emulated), with a
// switching delay of -delay per reconfiguration (25ms like a piezo MEMS
// switch, 1ms like a tunable-transceiver switch); drivers for real switches
// implement ocs.Switch and are added here.
//
// With -metrics-addr the daemon serves Prometheus metrics over plain HTTP
// at http://ADDR/metrics (a listener of its own, without the token: put it
// on a management network) and prints "occl-ocsd metrics on HOST:PORT"
// after the listening line. The metrics are those of ocs.ServerConfig's
// Registry: occl_ocsd_apply_seconds, occl_ocsd_switching_seconds,
// occl_ocsd_state_write_seconds (histograms), occl_ocsd_circuits_installed,
// occl_ocsd_ports_failed, occl_ocsd_ports_drained, occl_ocsd_generation
// (gauges), the gRPC server metrics (grpc_server_handled_total by
// grpc_method and grpc_code, grpc_server_handling_seconds, ...) and the Go
// runtime and process collectors.
//
// Flags:
//
//	-listen ADDR   address to listen on (default 127.0.0.1:0, a free port)
//	-ports N       number of switch ports (default 64)
//	-delay D       switching delay of the emulated switch (default 25ms)
//	-state FILE    state file (default: none, state is lost on exit)
//	-driver NAME   switch driver (default and only value: emulated)
//	-no-auth       serve without a token (only if OCCL_OCS_TOKEN is unset)
//	-tls-cert FILE serve TLS with this PEM certificate (with -tls-key)
//	-tls-key FILE  the certificate's PEM key
//	-tls-ca FILE   require client certificates signed by these PEM authorities
//	-metrics-addr ADDR serve Prometheus metrics at http://ADDR/metrics (default: off)
//	-v             log every call and every change to standard error
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/occl/occl/reconfig/ocs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the daemon until ctx is done; it returns the exit code (0 after
// a graceful stop, 1 on a failure, 2 on a usage error).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("occl-ocsd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	ports := fs.Int("ports", 64, "number of switch ports")
	delay := fs.Duration("delay", ocs.PiezoDelay, "switching delay of the emulated switch")
	statePath := fs.String("state", "", "state file (empty: state is lost on exit)")
	driver := fs.String("driver", "emulated", "switch driver")
	noAuth := fs.Bool("no-auth", false, "serve without a bearer token when OCCL_OCS_TOKEN is unset")
	tlsCert := fs.String("tls-cert", "", "serve TLS with this PEM certificate (with -tls-key)")
	tlsKey := fs.String("tls-key", "", "PEM key of -tls-cert")
	tlsCA := fs.String("tls-ca", "", "require client certificates signed by the PEM authorities in this file (with -tls-cert)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (empty: off)")
	verbose := fs.Bool("v", false, "verbose logging")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: OCCL_OCS_TOKEN=secret occl-ocsd [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "occl-ocsd: unexpected arguments %q\n", fs.Args())
		return 2
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	token := os.Getenv("OCCL_OCS_TOKEN")
	if token == "" && !*noAuth {
		fmt.Fprintln(stderr, "occl-ocsd: set OCCL_OCS_TOKEN to the bearer token clients must send (or pass -no-auth to serve without one)")
		return 2
	}
	if *driver != "emulated" {
		fmt.Fprintf(stderr, "occl-ocsd: unknown driver %q (available: emulated)\n", *driver)
		return 2
	}
	var grpcOpts []grpc.ServerOption
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		cfg, err := ocs.ServerTLS(*tlsCert, *tlsKey, *tlsCA)
		if err != nil {
			fmt.Fprintf(stderr, "occl-ocsd: -tls-cert, -tls-key, -tls-ca: %v\n", err)
			return 2
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	sw, err := ocs.NewEmulated(*ports, *delay)
	if err != nil {
		fmt.Fprintf(stderr, "occl-ocsd: %v\n", err)
		return 2
	}
	var reg *prometheus.Registry
	if *metricsAddr != "" {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg := ocs.ServerConfig{StatePath: *statePath, Token: token, Logger: logger, GRPCOptions: grpcOpts}
	if reg != nil {
		cfg.Registry = reg
	}
	srv, err := ocs.NewServer(sw, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "occl-ocsd: %v\n", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), ocs.DefaultStopTimeout)
		defer cancel()
		srv.Stop(sctx)
	}()
	if err := srv.Reconcile(ctx); err != nil {
		fmt.Fprintf(stderr, "occl-ocsd: %v\n", err)
		return 1
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "occl-ocsd: %v\n", err)
		return 1
	}
	if token != "" && len(grpcOpts) == 0 && !lis.Addr().(*net.TCPAddr).IP.IsLoopback() {
		logger.Warn("serving without TLS beyond loopback: the bearer token travels in clear text; pass -tls-cert and -tls-key", "addr", lis.Addr().String())
	}
	t := srv.Topology()
	fmt.Fprintf(stdout, "occl-ocsd listening on %s\n", lis.Addr())
	if reg != nil {
		mlis, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			lis.Close()
			fmt.Fprintf(stderr, "occl-ocsd: -metrics-addr: %v\n", err)
			return 1
		}
		stopMetrics := serveMetrics(mlis, reg, logger)
		defer stopMetrics()
		fmt.Fprintf(stdout, "occl-ocsd metrics on %s\n", mlis.Addr())
	}
	logger.Info("serving", "addr", lis.Addr().String(), "ports", *ports, "delay", *delay,
		"state", *statePath, "generation", t.Generation, "connects", len(t.Connects), "auth", token != "",
		"tls", len(grpcOpts) > 0, "client_certs", *tlsCA != "")
	start := time.Now()
	if err := srv.Serve(ctx, lis); err != nil {
		fmt.Fprintf(stderr, "occl-ocsd: %v\n", err)
		return 1
	}
	logger.Info("stopped", "uptime", time.Since(start))
	return 0
}

// serveMetrics serves reg at /metrics on lis until the returned function is
// called.
func serveMetrics(lis net.Listener, reg *prometheus.Registry, logger *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server failed", "addr", lis.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		<-done
	}
}
