package netns_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/internal/netns"
)

// The test binary doubles as a TCP echo server and client run inside the
// lab's hosts.
func TestMain(m *testing.M) {
	switch os.Getenv("NETNS_TEST_MODE") {
	case "serve":
		ln, err := net.Listen("tcp", os.Getenv("NETNS_TEST_ADDR"))
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		fmt.Println("READY")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("NETNS_TEST_ADDR"), 2*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(0)
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		msg := strings.Repeat("x", 1<<20)
		go io.WriteString(c, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			fmt.Println("ERROR echo", err)
			os.Exit(0)
		}
		fmt.Println("OK", c.LocalAddr())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func dial(t *testing.T, h *netns.Host, addr string) string {
	t.Helper()
	cmd := h.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NETNS_TEST_MODE=dial", "NETNS_TEST_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dial from %s: %v: %s", h.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestLab checks what the tests built on the lab rely on: hosts reach each
// other on each network from their own address, a link set down cuts the
// host off and set up again restores it, the counters see the traffic,
// and nothing of the lab is left afterwards.
func TestLab(t *testing.T) {
	var names []string
	t.Run("lab", func(t *testing.T) {
		lab := netns.New(t)
		a, b := lab.Network(), lab.Network()
		h0, h1 := lab.Host(a, b), lab.Host(a, b)
		names = lab.Namespaces()
		if h1.Addr(a) != "10.233.0.2" || h1.Addr(b) != "10.233.1.2" || h1.IfName(b) != "eth1" {
			t.Fatalf("host 1: %s on %s, %s on %s", h1.Addr(a), h1.IfName(a), h1.Addr(b), h1.IfName(b))
		}
		srv := h0.Command(os.Args[0], "-test.run=^$")
		srv.Env = append(os.Environ(), "NETNS_TEST_MODE=serve", "NETNS_TEST_ADDR=0.0.0.0:7000")
		stdout, _ := srv.StdoutPipe()
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
		if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "READY\n" {
			t.Fatalf("server: %q", line)
		}
		_, txA0, err := h1.Counters(a)
		if err != nil {
			t.Fatal(err)
		}
		_, txB0, _ := h1.Counters(b)
		if got := dial(t, h1, h0.Addr(a)+":7000"); got != "OK "+h1.Addr(a)+":"+strings.Split(got, ":")[1] {
			t.Fatalf("dial over network a: %q", got)
		}
		_, txA1, _ := h1.Counters(a)
		_, txB1, _ := h1.Counters(b)
		if txA1-txA0 < 1<<20 || txB1-txB0 > 64<<10 {
			t.Errorf("1 MiB sent over network a: a's counter grew %d bytes, b's %d", txA1-txA0, txB1-txB0)
		}
		if got := dial(t, h1, h0.Addr(b)+":7000"); !strings.HasPrefix(got, "OK "+h1.Addr(b)+":") {
			t.Fatalf("dial over network b: %q", got)
		}
		if err := h1.SetLink(a, false); err != nil {
			t.Fatal(err)
		}
		if got := dial(t, h1, h0.Addr(a)+":7000"); !strings.HasPrefix(got, "ERROR") {
			t.Fatalf("dial over a link set down: %q", got)
		}
		if got := dial(t, h1, h0.Addr(b)+":7000"); !strings.HasPrefix(got, "OK ") {
			t.Fatalf("dial over network b while a is down: %q", got)
		}
		if err := h1.SetLink(a, true); err != nil {
			t.Fatal(err)
		}
		if err := h1.SetRate(a, "50mbit"); err != nil {
			t.Fatal(err)
		}
		if got := dial(t, h1, h0.Addr(a)+":7000"); !strings.HasPrefix(got, "OK ") {
			t.Fatalf("dial over network a, up again and rate-limited: %q", got)
		}
	})
	if len(names) == 0 {
		return // skipped
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s left behind:\n%s", n, out)
		}
	}
}
