package logx

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	all := map[Subsystem]bool{Init: true, Coll: true, Tune: true, Rewire: true, Net: true}
	for _, tc := range []struct {
		level, subsys string
		want          slog.Level
		on            map[Subsystem]bool
		str           string
	}{
		{"", "", slog.LevelWarn, all, "OCCL_DEBUG=WARN OCCL_DEBUG_SUBSYS=ALL"},
		{"info", "", slog.LevelInfo, all, "OCCL_DEBUG=INFO OCCL_DEBUG_SUBSYS=ALL"},
		{"DEBUG", "INIT,TUNE", slog.LevelDebug, map[Subsystem]bool{Init: true, Tune: true}, "OCCL_DEBUG=DEBUG OCCL_DEBUG_SUBSYS=INIT,TUNE"},
		{"TRACE", " tune ", slog.LevelDebug, map[Subsystem]bool{Tune: true}, "OCCL_DEBUG=DEBUG OCCL_DEBUG_SUBSYS=TUNE"},
		{"INFO", "^INIT,NET", slog.LevelInfo, map[Subsystem]bool{Coll: true, Tune: true, Rewire: true}, "OCCL_DEBUG=INFO OCCL_DEBUG_SUBSYS=COLL,TUNE,REWIRE"},
		{"INFO", "ALL", slog.LevelInfo, all, "OCCL_DEBUG=INFO OCCL_DEBUG_SUBSYS=INIT,COLL,TUNE,REWIRE,NET"},
		{"INFO", "^ALL", slog.LevelInfo, map[Subsystem]bool{}, "OCCL_DEBUG=INFO OCCL_DEBUG_SUBSYS="},
		{"WARN", "REWIRE", slog.LevelWarn, map[Subsystem]bool{Rewire: true}, "OCCL_DEBUG=WARN OCCL_DEBUG_SUBSYS=REWIRE"},
	} {
		c, err := Parse(tc.level, tc.subsys)
		if err != nil {
			t.Fatalf("Parse(%q, %q): %v", tc.level, tc.subsys, err)
		}
		if c.Level != tc.want || c.Off {
			t.Errorf("Parse(%q, %q): level %v, want %v", tc.level, tc.subsys, c.Level, tc.want)
		}
		for _, s := range Subsystems {
			if got := c.Enabled(slog.LevelDebug, s); got != (tc.on[s] && tc.want <= slog.LevelDebug) {
				t.Errorf("Parse(%q, %q): DEBUG of %s shown = %v", tc.level, tc.subsys, s, got)
			}
			if got := c.Enabled(tc.want, s); got != (tc.on[s] || tc.want >= slog.LevelWarn) {
				t.Errorf("Parse(%q, %q): %v of %s shown = %v", tc.level, tc.subsys, tc.want, s, got)
			}
			if !c.Enabled(slog.LevelWarn, s) && tc.want <= slog.LevelWarn {
				t.Errorf("Parse(%q, %q): a warning of %s is hidden", tc.level, tc.subsys, s)
			}
		}
		if c.String() != tc.str {
			t.Errorf("Parse(%q, %q).String() = %q, want %q", tc.level, tc.subsys, c.String(), tc.str)
		}
	}
	if c, err := Parse("OFF", ""); err != nil || !c.Off || c.Enabled(slog.LevelError, Init) {
		t.Errorf("OFF: %+v, %v", c, err)
	}
	for _, bad := range [][2]string{{"LOUD", ""}, {"INFO", "INIT,GPU"}, {"INFO", "^"}} {
		if _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("Parse(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(LevelEnv, "INFO")
	t.Setenv(SubsysEnv, "^COLL")
	c, err := FromEnv()
	if err != nil || c.Level != slog.LevelInfo || c.Enabled(slog.LevelInfo, Coll) || !c.Enabled(slog.LevelInfo, Rewire) {
		t.Errorf("FromEnv: %v, %v", c, err)
	}
}

// TestHandler checks what a logger made by New writes, by level and by
// the subsystem its loggers were derived for.
func TestHandler(t *testing.T) {
	cfg, err := Parse("DEBUG", "TUNE,INIT")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	l := New(&buf, cfg).With("rank", 0)
	tune, coll := For(l, Tune), For(l, Coll)
	tune.Debug("chose", "op", "AllReduce")
	coll.Debug("hidden debug")
	coll.Info("hidden info")
	coll.Warn("shown warning")
	l.Info("no subsystem")
	For(tune.WithGroup("g"), Init).Info("regrouped", "k", 1)
	out := buf.String()
	for _, want := range []string{"msg=chose rank=0 subsys=TUNE op=AllReduce", "msg=\"shown warning\" rank=0 subsys=COLL", "msg=\"no subsystem\"", "msg=regrouped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("a COLL record below WARN was written:\n%s", out)
	}
	if coll.Enabled(t.Context(), slog.LevelDebug) || !tune.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("Enabled ignores the subsystem")
	}
	if !Never(coll, slog.LevelDebug) || Never(coll, slog.LevelWarn) || Never(tune, slog.LevelDebug) {
		t.Error("Never ignores the subsystem or the level")
	}
	other := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	if Never(For(other, Tune), slog.LevelDebug) {
		t.Error("Never decides for a handler of another package")
	}

	buf.Reset()
	quiet := New(&buf, Default)
	For(quiet, Init).Info("settings")
	For(quiet, Tune).Debug("choice")
	if buf.Len() != 0 {
		t.Errorf("the default configuration wrote %q", buf.String())
	}
	For(quiet, Net).Warn("link down")
	if !strings.Contains(buf.String(), "link down") {
		t.Error("the default configuration hides warnings")
	}
}
