// Command occl-ocsctl is the command-line client of the occl OCS controller
// (occl-ocsd).
//
// Usage:
//
//	occl-ocsctl [-addr HOST:PORT] [-timeout 30s] [-json]
//	    [-tls-ca FILE [-tls-cert FILE -tls-key FILE]] COMMAND [ARGS]
//
// Commands:
//
//	topology                 print the installed cross-connects and port states
//	apply [-id ID] PAIRS     make the switch hold exactly PAIRS, e.g. 0-5,1-7
//	                         ("none" tears every circuit down); retrying with
//	                         the same -id is safe (default: a random id)
//	watch [-count N]         print events (a snapshot first) until interrupted
//	                         or N events were printed
//	drain [-force] PORT      exclude PORT from future targets; -force tears
//	                         down its circuit instead of refusing
//	undrain PORT             return PORT to service
//
// The controller address comes from -addr or OCCL_OCS_ADDR, the bearer token
// from OCCL_OCS_TOKEN. With -tls-ca (OCCL_OCS_TLS_CA) the client speaks TLS
// and verifies the controller's certificate against those authorities;
// -tls-cert and -tls-key (OCCL_OCS_TLS_CERT, OCCL_OCS_TLS_KEY) present a
// client certificate to a controller that requires one. Any of them turns
// TLS on (with only a client certificate, the system's authorities verify
// the controller); the token is then never sent in clear. Exit status: 0 on
// success, 1 when the call failed, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/occl/occl/reconfig/ocs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: occl-ocsctl [-addr HOST:PORT] [-timeout D] [-json] [-tls-ca FILE [-tls-cert FILE -tls-key FILE]] COMMAND [ARGS]

commands:
  topology                 print the installed cross-connects and port states
  apply [-id ID] PAIRS     make the switch hold exactly PAIRS, e.g. 0-5,1-7 ("none": no circuits)
  watch [-count N]         print events until interrupted (or N events)
  drain [-force] PORT      exclude PORT from future targets (-force tears down its circuit)
  undrain PORT             return PORT to service

The address defaults to $OCCL_OCS_ADDR, the bearer token comes from $OCCL_OCS_TOKEN,
the TLS files default to $OCCL_OCS_TLS_CA, $OCCL_OCS_TLS_CERT and $OCCL_OCS_TLS_KEY.

global flags:
`

// run executes one command and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("occl-ocsctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", os.Getenv("OCCL_OCS_ADDR"), "controller address host:port (default $OCCL_OCS_ADDR)")
	timeout := fs.Duration("timeout", ocs.DefaultCallTimeout, "deadline of each call (watch: none)")
	asJSON := fs.Bool("json", false, "print JSON")
	tlsCA := fs.String("tls-ca", os.Getenv(ocs.EnvTLSCA), "speak TLS, verifying the controller against the PEM authorities in this file (default $"+ocs.EnvTLSCA+")")
	tlsCert := fs.String("tls-cert", os.Getenv(ocs.EnvTLSCert), "speak TLS, presenting this PEM client certificate (default $"+ocs.EnvTLSCert+")")
	tlsKey := fs.String("tls-key", os.Getenv(ocs.EnvTLSKey), "PEM key of -tls-cert (default $"+ocs.EnvTLSKey+")")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if *addr == "" {
		fmt.Fprintln(stderr, "occl-ocsctl: no controller address: pass -addr HOST:PORT or set OCCL_OCS_ADDR")
		return 2
	}
	if *timeout <= 0 {
		// ocs.WithTimeout(0) would leave calls without a deadline, and
		// ocs.Dial refuses a negative one.
		fmt.Fprintf(stderr, "occl-ocsctl: -timeout %v: want a positive duration, e.g. 30s\n", *timeout)
		return 2
	}
	cmd, cmdArgs := fs.Arg(0), fs.Args()[1:]
	c := &cli{stdout: stdout, stderr: stderr, json: *asJSON, timeout: *timeout}
	var run func(ctx context.Context, client *ocs.Client, args []string) error
	switch cmd {
	case "topology":
		run = c.topology
	case "apply":
		run = c.apply
	case "watch":
		run = c.watch
	case "drain":
		run = c.drain
	case "undrain":
		run = c.undrain
	default:
		fmt.Fprintf(stderr, "occl-ocsctl: unknown command %q\n", cmd)
		fs.Usage()
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	opts := []ocs.Option{ocs.WithTimeout(*timeout)}
	if tok := os.Getenv(ocs.EnvToken); tok != "" {
		opts = append(opts, ocs.WithToken(tok))
	}
	if *tlsCA != "" || *tlsCert != "" || *tlsKey != "" {
		cfg, err := ocs.ClientTLS(*tlsCA, *tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintf(stderr, "occl-ocsctl: %v\n", err)
			return 2
		}
		opts = append(opts, ocs.WithTLS(cfg))
	}
	client, err := ocs.Dial(ctx, *addr, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "occl-ocsctl: %v\n", err)
		return 1
	}
	defer client.Close()
	if err := run(ctx, client, cmdArgs); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "occl-ocsctl %s: %v\n", cmd, err)
			return 2
		}
		fmt.Fprintf(stderr, "occl-ocsctl: %v\n", err)
		return 1
	}
	return 0
}

// usageError is a mistake on the command line.
type usageError struct{ error }

type cli struct {
	stdout, stderr io.Writer
	json           bool
	timeout        time.Duration
}

func (c *cli) print(v any, text string) error {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		return enc.Encode(v)
	}
	_, err := fmt.Fprint(c.stdout, text)
	return err
}

// subFlags parses a command's own flags.
func (c *cli) subFlags(name string, args []string, define func(*flag.FlagSet)) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	define(fs)
	if err := fs.Parse(args); err != nil {
		return nil, usageError{err}
	}
	return fs, nil
}

func (c *cli) topology(ctx context.Context, client *ocs.Client, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", args)}
	}
	t, err := client.GetTopology(ctx)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d, %d ports, %d cross-connects\n", t.Generation, t.Ports, len(t.Connects))
	for _, cc := range t.Connects {
		fmt.Fprintf(&b, "  %s\n", cc)
	}
	for _, st := range []ocs.PortState{ocs.PortFailed, ocs.PortDrained} {
		if ps := t.PortsIn(st); len(ps) > 0 {
			fmt.Fprintf(&b, "%s ports: %s\n", st, joinInts(ps))
		}
	}
	return c.print(t, b.String())
}

func (c *cli) apply(ctx context.Context, client *ocs.Client, args []string) error {
	var id *string
	fs, err := c.subFlags("apply", args, func(fs *flag.FlagSet) {
		id = fs.String("id", "", "request id (default: random)")
	})
	if err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{errors.New(`want the target cross-connects, e.g. "0-5,1-7" (or "none")`)}
	}
	connects, err := ocs.ParseConnects(strings.Join(fs.Args(), ","))
	if err != nil {
		return usageError{err}
	}
	if len(connects) == 0 && strings.TrimSpace(strings.Join(fs.Args(), " ")) != "none" {
		// An empty argument (an unset variable, say) must not tear every
		// circuit down: that takes the explicit word.
		return usageError{errors.New(`no cross-connects given; pass "none" to tear every circuit down`)}
	}
	if *id == "" {
		*id = ocs.NewRequestID()
	}
	r, err := client.Apply(ctx, *id, connects)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("generation %d: +%d -%d =%d in %v (request %s)\n",
		r.Generation, r.Added, r.Removed, r.Unchanged, r.SwitchingTime.Round(time.Microsecond), *id)
	if r.Replayed {
		text = "replayed: " + text
	}
	return c.print(r, text)
}

func (c *cli) watch(ctx context.Context, client *ocs.Client, args []string) error {
	var count *int
	fs, err := c.subFlags("watch", args, func(fs *flag.FlagSet) {
		count = fs.Int("count", 0, "stop after this many events (0: until interrupted)")
	})
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	n := 0
	err = client.Watch(ctx, func(ev ocs.Event) error {
		if err := c.print(ev, ev.Time.Format(time.RFC3339Nano)+" "+ev.String()+"\n"); err != nil {
			return err
		}
		n++
		if *count > 0 && n >= *count {
			return ocs.ErrStopWatch
		}
		return nil
	})
	if err != nil && ctx.Err() != nil {
		return nil // interrupted
	}
	return err
}

func (c *cli) portArg(args []string) (int, error) {
	if len(args) != 1 {
		return 0, usageError{errors.New("want exactly one PORT")}
	}
	p, err := strconv.Atoi(args[0])
	if err != nil || p < 0 {
		return 0, usageError{fmt.Errorf("bad port %q", args[0])}
	}
	return p, nil
}

func (c *cli) drain(ctx context.Context, client *ocs.Client, args []string) error {
	var force *bool
	fs, err := c.subFlags("drain", args, func(fs *flag.FlagSet) {
		force = fs.Bool("force", false, "tear down the port's circuit")
	})
	if err != nil {
		return err
	}
	p, err := c.portArg(fs.Args())
	if err != nil {
		return err
	}
	r, err := client.Drain(ctx, p, *force)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("port %d %s (generation %d)\n", p, r.Port.State, r.Generation)
	if r.Removed != nil {
		text = fmt.Sprintf("port %d %s, tore down %v (generation %d)\n", p, r.Port.State, *r.Removed, r.Generation)
	}
	return c.print(r, text)
}

func (c *cli) undrain(ctx context.Context, client *ocs.Client, args []string) error {
	p, err := c.portArg(args)
	if err != nil {
		return err
	}
	r, err := client.Undrain(ctx, p)
	if err != nil {
		return err
	}
	return c.print(r, fmt.Sprintf("port %d %s (generation %d)\n", p, r.Port.State, r.Generation))
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
