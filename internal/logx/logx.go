// Package logx gives occl's logging levels and subsystems, configured as
// NCCL configures its debug output:
//
//	OCCL_DEBUG=WARN|INFO|DEBUG   the least severe level shown (default WARN;
//	                             also ERROR, TRACE = DEBUG, and NONE or OFF)
//	OCCL_DEBUG_SUBSYS=LIST       the subsystems whose INFO and DEBUG records
//	                             are shown: a comma-separated list of INIT,
//	                             COLL, TUNE, REWIRE, NET or ALL (default);
//	                             a leading ^ shows all but the listed ones
//
// Warnings and errors are shown whatever the subsystem, as NCCL's are.
// Loggers are log/slog loggers; a logger belongs to a subsystem when it
// was derived with For, which adds the attribute subsys=NAME, and the
// Handler filters records by it before they are formatted, so a disabled
// subsystem costs one call to Enabled.
package logx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// Subsystem names a part of occl that logs.
type Subsystem string

// Subsystems.
const (
	// Init is bootstrap and configuration: rendezvous, connection setup,
	// the settings in effect.
	Init Subsystem = "INIT"
	// Coll is the operations: their progress, stalls and failures.
	Coll Subsystem = "COLL"
	// Tune is the choice of schedules and the cost model's predictions.
	Tune Subsystem = "TUNE"
	// Rewire is the reconfiguration of the fabric's links.
	Rewire Subsystem = "REWIRE"
	// Net is the control plane and the transports: heartbeats, reports,
	// verdicts.
	Net Subsystem = "NET"
)

// Subsystems lists every subsystem.
var Subsystems = []Subsystem{Init, Coll, Tune, Rewire, Net}

// Key is the attribute that For adds and Handler filters on.
const Key = "subsys"

// Environment variables read by FromEnv.
const (
	LevelEnv  = "OCCL_DEBUG"
	SubsysEnv = "OCCL_DEBUG_SUBSYS"
)

// Config is a parsed OCCL_DEBUG and OCCL_DEBUG_SUBSYS.
type Config struct {
	// Level is the least severe level shown.
	Level slog.Level
	// Off shows nothing.
	Off bool
	// subsys is the set of shown subsystems (nil: all).
	subsys map[Subsystem]bool
}

// Default is the configuration without environment variables: warnings
// and errors of every subsystem.
var Default = Config{Level: slog.LevelWarn}

// Parse parses OCCL_DEBUG's and OCCL_DEBUG_SUBSYS's values; empty values
// take the defaults.
func Parse(level, subsys string) (Config, error) {
	c := Default
	switch strings.ToUpper(strings.TrimSpace(level)) {
	case "", "WARN":
	case "INFO":
		c.Level = slog.LevelInfo
	case "DEBUG", "TRACE":
		c.Level = slog.LevelDebug
	case "ERROR":
		c.Level = slog.LevelError
	case "NONE", "OFF":
		c.Off = true
	default:
		return Default, fmt.Errorf("%s=%q: want WARN, INFO, DEBUG, ERROR or NONE", LevelEnv, level)
	}
	s := strings.ToUpper(strings.TrimSpace(subsys))
	if s == "" {
		return c, nil
	}
	exclude := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	listed := map[Subsystem]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "ALL" {
			for _, sub := range Subsystems {
				listed[sub] = true
			}
			continue
		}
		if !known(Subsystem(name)) {
			return Default, fmt.Errorf("%s=%q: unknown subsystem %q (want %s or ALL)", SubsysEnv, subsys, name, joined(Subsystems))
		}
		listed[Subsystem(name)] = true
	}
	c.subsys = map[Subsystem]bool{}
	for _, sub := range Subsystems {
		if listed[sub] != exclude {
			c.subsys[sub] = true
		}
	}
	return c, nil
}

// FromEnv parses OCCL_DEBUG and OCCL_DEBUG_SUBSYS.
func FromEnv() (Config, error) { return Parse(os.Getenv(LevelEnv), os.Getenv(SubsysEnv)) }

func known(s Subsystem) bool {
	for _, k := range Subsystems {
		if k == s {
			return true
		}
	}
	return false
}

func joined(ss []Subsystem) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

// Enabled reports whether a record of the level from subsystem sub (""
// for none) is shown.
func (c Config) Enabled(level slog.Level, sub Subsystem) bool {
	switch {
	case c.Off || level < c.Level:
		return false
	case level >= slog.LevelWarn || sub == "" || c.subsys == nil:
		return true
	}
	return c.subsys[sub]
}

// String describes the configuration in the environment's syntax, e.g.
// "OCCL_DEBUG=INFO OCCL_DEBUG_SUBSYS=INIT,TUNE".
func (c Config) String() string {
	level := "NONE"
	if !c.Off {
		level = strings.ToUpper(c.Level.String())
	}
	subs := "ALL"
	if c.subsys != nil {
		var on []Subsystem
		for _, s := range Subsystems {
			if c.subsys[s] {
				on = append(on, s)
			}
		}
		subs = joined(on)
	}
	return fmt.Sprintf("%s=%s %s=%s", LevelEnv, level, SubsysEnv, subs)
}

// Handler passes the records Config shows, by level and by the subsystem
// of the logger, to another handler.
type Handler struct {
	inner slog.Handler
	cfg   Config
	sub   Subsystem
}

// NewHandler returns a handler filtering records for inner, which should
// accept every level.
func NewHandler(inner slog.Handler, cfg Config) *Handler { return &Handler{inner: inner, cfg: cfg} }

// Enabled reports whether the configuration shows records of the level
// from the handler's subsystem.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.cfg.Enabled(level, h.sub) && h.inner.Enabled(ctx, level)
}

// Never reports whether l never logs records of level: its handler is a
// Handler whose configuration, fixed when it was made, leaves level out
// for its subsystem. For any other handler, whose mind may change, it
// reports false. A hot path can so skip even the call to Enabled.
func Never(l *slog.Logger, level slog.Level) bool {
	h, ok := l.Handler().(*Handler)
	return ok && !h.cfg.Enabled(level, h.sub)
}

// Handle passes r on.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error { return h.inner.Handle(ctx, r) }

// WithAttrs returns a handler with the attributes; an attribute Key sets
// the subsystem.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := &Handler{inner: h.inner.WithAttrs(attrs), cfg: h.cfg, sub: h.sub}
	for _, a := range attrs {
		if a.Key == Key {
			out.sub = Subsystem(a.Value.String())
		}
	}
	return out
}

// WithGroup returns a handler that puts later attributes in the group.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), cfg: h.cfg, sub: h.sub}
}

// New returns a logger writing text records to w as cfg says.
func New(w io.Writer, cfg Config) *slog.Logger {
	if cfg.Off {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(NewHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}), cfg))
}

// For returns l's logger for subsystem s.
func For(l *slog.Logger, s Subsystem) *slog.Logger { return l.With(Key, string(s)) }
