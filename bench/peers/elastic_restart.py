#!/usr/bin/env python3
"""What a torchrun-elastic restart costs after a rank dies: the usual
PyTorch answer to a failure, measured on this machine, to compare with
occl's in-place recovery (Communicator.Shrink).

Run it with the Python that has the occl package installed (see
cgo/python), from the repository root:

    venv/bin/python bench/peers/elastic_restart.py                  # 30 trials at 4 and 8 processes, occl
    venv/bin/python bench/peers/elastic_restart.py --backends gloo --trials 10
    venv/bin/python bench/peers/elastic_restart.py --table FILE      # print the table again

Each trial runs a small data-parallel training job under torchrun
(torch.distributed.run with --nproc_per_node N --max_restarts 1, its
default --monitor_interval of 5 s and --standalone's c10d rendezvous on a
free port): a 3-layer MLP
whose ranks exchange their batches with all_to_all_single and average
their gradients with all_reduce every step. Rank 0 saves the model and
optimizer state_dict to a checkpoint every step (written to a temporary
file, then renamed); a starting worker loads it when it exists. After
step --kill-step the last rank kills itself with SIGKILL. torchrun's agent
notices the dead worker, stops the whole group (SIGTERM), runs the
rendezvous again and starts every worker anew; they import torch, create
the process group, load the checkpoint and resume training.

Every worker appends time stamps (time.time()) to a file per trial and
rank; the agent is torch.distributed.run's own main() with its
LocalElasticAgent's monitor, stop and start methods wrapped to log time
stamps too. The parent reads them and splits the time from the kill to the
first successful collective of the restarted group (an all_reduce that
checks every rank resumed from the same step) into

    detect      kill -> the agent's monitor sees the failed worker (and
                starts closing the group)
    teardown    -> the agent has stopped the old group (SIGTERM, wait)
    rendezvous  -> the agent starts the new workers
    spawn       -> the new workers run (process and interpreter start)
    import      -> import torch (and occl.torch) done
    init        -> init_process_group done
    load        -> model built and checkpoint loaded
    collective  -> the first collective done

each milestone taken at the slowest rank (the group is only as far as its
last rank). The parent also checks every trial: the restarted group
finished all steps, resuming after the checkpointed step, and its final
weights match a single-process replay of the same training (all ranks'
steps computed in one process, gradients averaged) within 1e-5.

One JSON line per trial is appended to
bench/results/elastic-restart-<date>.jsonl (--out), with the machine's
load average at its start. --table prints p50, p99 (nearest rank) and the
range of every phase per backend and process count, as Markdown.
"""

import time

T0 = time.time()  # a worker's first moment in Python, before any import below

import argparse
import collections
import datetime
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.abspath(__file__)
PHASES = ("detect", "teardown", "rendezvous", "spawn", "import", "init", "load", "collective")

# The job: batch rows per rank, input width, hidden width.
BATCH, DIM, HIDDEN = 64, 32, 64


def build(torch, lr):
    """The model (the same initial weights on every rank) and its optimizer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, DIM)
    )
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, opt


def batch(torch, step, rank):
    """Rank's batch of step, before the exchange."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, DIM, generator=g)


def target(torch, x):
    return 0.5 * torch.roll(x, 1, dims=1)


# --- worker ----------------------------------------------------------------


def worker(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--kill-step", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    args = ap.parse_args(argv)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    log = open(os.path.join(args.dir, "times-%d-%d.jsonl" % (attempt, rank)), "a")

    def mark(event, t=None, **kw):
        kw.update(event=event, t=time.time() if t is None else t, rank=rank, attempt=attempt)
        log.write(json.dumps(kw) + "\n")
        log.flush()

    mark("start", T0)
    import torch
    import torch.distributed as dist

    if args.backend == "occl":
        import occl.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    mark("imported")
    dist.init_process_group(args.backend)
    mark("init")
    model, opt = build(torch, args.lr)
    ckpt = os.path.join(args.dir, "ckpt.pt")
    first, losses = 0, []
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first, losses = state["step"] + 1, state["losses"]
    mark("loaded", step=first)
    check = torch.tensor([first, -first], dtype=torch.float64)
    dist.all_reduce(check, op=dist.ReduceOp.MAX)
    if check.tolist() != [first, -first]:
        raise SystemExit("rank %d resumed at step %d, others at %s" % (rank, first, check.tolist()))
    mark("first_collective")

    params = list(model.parameters())
    for step in range(first, args.steps):
        x = batch(torch, step, rank)
        mine = torch.empty_like(x)
        dist.all_to_all_single(mine, x)  # row block j of every rank's batch goes to rank j
        loss = torch.nn.functional.mse_loss(model(mine), target(torch, mine))
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
        dist.all_reduce(flat)
        flat /= world
        off = 0
        for p in params:
            p.grad.copy_(flat[off : off + p.numel()].view_as(p))
            off += p.numel()
        opt.step()
        losses.append(flat[-1].item())
        if rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "losses": losses}, tmp)
            os.replace(tmp, ckpt)
        if attempt == 0 and step == args.kill_step and rank == world - 1:
            mark("kill", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        weights = torch.cat([p.detach().reshape(-1) for p in params]).tolist()
        with open(os.path.join(args.dir, "result.json"), "w") as f:
            json.dump({"attempt": attempt, "world": world, "resumed_from": first, "losses": losses, "weights": weights}, f)
    mark("done")
    dist.destroy_process_group()


# --- agent -----------------------------------------------------------------


def agent(logfile, argv):
    """torch.distributed.run's main() with time stamps of its agent's work."""
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.api import PContext, Std
    from torch.distributed.run import main

    # torch 1.13's Std.from_str("0") (--redirects' default) looks the value
    # up by iterating Std, which from Python 3.11 on skips the zero member
    # NONE; it returns None and torchrun fails before starting a worker.
    # Give it what it means.
    from_str = Std.from_str.__func__
    Std.from_str = classmethod(lambda cls, vm: Std.NONE if from_str(cls, vm) is None else from_str(cls, vm))
    log = open(logfile, "a")

    def mark(event, **kw):
        kw.update(event=event, t=time.time())
        log.write(json.dumps(kw) + "\n")
        log.flush()

    monitor, stop, start = LocalElasticAgent._monitor_workers, LocalElasticAgent._stop_workers, LocalElasticAgent._start_workers
    close = PContext.close

    # The monitor's poll closes the worker group (SIGTERM to every worker,
    # then wait) as soon as it finds one failed: close's start is the
    # moment the failure was noticed.
    def close_group(self, *args, **kw):
        mark("closing")
        close(self, *args, **kw)
        mark("closed")

    def monitor_workers(self, group):
        r = monitor(self, group)
        if r.state == api.WorkerState.FAILED:
            mark("failed", ranks=sorted(r.failures))
        return r

    def stop_workers(self, group):
        mark("stopping")
        stop(self, group)
        mark("stopped")

    def start_workers(self, group):
        mark("starting", restarts=group.spec.max_restarts - self._remaining_restarts)
        return start(self, group)

    LocalElasticAgent._monitor_workers = monitor_workers
    LocalElasticAgent._stop_workers = stop_workers
    LocalElasticAgent._start_workers = start_workers
    PContext.close = close_group
    main(argv)


# --- parent ----------------------------------------------------------------


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def replay(world, steps, lr):
    """The job's final weights and losses, all ranks computed in one process."""
    import torch

    torch.set_num_threads(1)
    model, opt = build(torch, lr)
    params = list(model.parameters())
    rows = BATCH // world
    losses = []
    for step in range(steps):
        xs = [batch(torch, step, r) for r in range(world)]
        grads, total = [torch.zeros_like(p) for p in params], 0.0
        for j in range(world):
            mine = torch.cat([x[j * rows : (j + 1) * rows] for x in xs])
            loss = torch.nn.functional.mse_loss(model(mine), target(torch, mine))
            opt.zero_grad()
            loss.backward()
            for g, p in zip(grads, params):
                g += p.grad
            total += loss.item()
        for g, p in zip(grads, params):
            p.grad.copy_(g / world)
        opt.step()
        losses.append(total / world)
    return torch.cat([p.detach().reshape(-1) for p in params]).tolist(), losses


# LAUNCHES is how many times a trial launches torchrun when its rendezvous
# port was taken between free_port and the bind (PORT_TAKEN in its output).
LAUNCHES = 3
PORT_TAKEN = "errno: 98 - Address already in use"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trial(args, backend, np_, n, reference):
    """Runs one trial and returns its record."""
    load = os.getloadavg()
    # The free port is free when chosen, not when torchrun binds it: another
    # program may take it in between, and the agent's rendezvous then fails
    # to listen (and its client waits 60 s). No worker ran; launch again on
    # another port.
    for launch in range(LAUNCHES):
        with tempfile.TemporaryDirectory(prefix="elastic-restart-") as d:
            agent_log = os.path.join(d, "agent.jsonl")
            # --standalone's rendezvous, on a free port rather than its fixed
            # 29400, so that other jobs on the machine do not collide with it.
            cmd = [sys.executable, SCRIPT, "--agent", agent_log, "--nnodes", "1", "--rdzv_backend", "c10d",
                   "--rdzv_endpoint", "127.0.0.1:%d" % free_port(), "--rdzv_id", "elastic-restart-%d-%d" % (os.getpid(), n),
                   "--nproc_per_node", str(np_), "--max_restarts", "1",
                   "--monitor_interval", str(args.monitor_interval), SCRIPT, "--worker", "--dir", d, "--backend", backend,
                   "--steps", str(args.steps), "--kill-step", str(args.kill_step), "--lr", str(args.lr)]
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
            t_launch = time.time()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=args.timeout)
            wall = time.time() - t_launch
            if p.returncode != 0:
                if launch + 1 < LAUNCHES and PORT_TAKEN in p.stdout:
                    continue
                raise RuntimeError("%s np=%d trial %d: torchrun exited with %d:\n%s" % (backend, np_, n, p.returncode, p.stdout[-4000:]))
            ag = read_jsonl(agent_log)
            marks = collections.defaultdict(list)
            for f in os.listdir(d):
                if f.startswith("times-"):
                    for r in read_jsonl(os.path.join(d, f)):
                        marks[(r["attempt"], r["event"])].append(r)
            with open(os.path.join(d, "result.json")) as f:
                res = json.load(f)
        break

    def agent_t(event, **match):
        for r in ag:
            if r["event"] == event and all(r.get(k) == v for k, v in match.items()):
                return r["t"]
        raise RuntimeError("%s np=%d trial %d: the agent logged no %s %s: %s" % (backend, np_, n, event, match, ag))

    def slowest(event):
        rs = marks[(1, event)]
        if len(rs) != np_:
            raise RuntimeError("%s np=%d trial %d: %d of %d restarted ranks logged %s" % (backend, np_, n, len(rs), np_, event))
        return max(r["t"] for r in rs)

    kills = marks[(0, "kill")]
    if len(kills) != 1:
        raise RuntimeError("%s np=%d trial %d: %d kills logged" % (backend, np_, n, len(kills)))
    t_kill = kills[0]["t"]
    t_failed = agent_t("failed")
    t_noticed = min(r["t"] for r in ag if r["event"] == "closing" and r["t"] >= t_kill)
    t_stopped = min(r["t"] for r in ag if r["event"] == "stopped" and r["t"] >= t_failed)
    chain = [t_kill, t_noticed, t_stopped, agent_t("starting", restarts=1)] + [
        slowest(e) for e in ("start", "imported", "init", "loaded", "first_collective")
    ]
    phases = {name: chain[i + 1] - chain[i] for i, name in enumerate(PHASES)}
    ref_w, ref_l = reference
    diff = max(abs(a - b) for a, b in zip(res["weights"], ref_w)) if len(res["weights"]) == len(ref_w) else float("inf")
    loss_diff = max(abs(a - b) for a, b in zip(res["losses"], ref_l)) if len(res["losses"]) == len(ref_l) else float("inf")
    return {
        "bench": "elastic-restart",
        "backend": backend,
        "np": np_,
        "trial": n,
        "monitor_interval": args.monitor_interval,
        "steps": args.steps,
        "kill_step": args.kill_step,
        "killed_rank": kills[0]["rank"],
        "attempt": res["attempt"],
        "resumed_from": res["resumed_from"],
        "loss_first": res["losses"][0],
        "loss_last": res["losses"][-1],
        "losses": len(res["losses"]),
        "max_weight_diff": diff,
        "max_loss_diff": loss_diff,
        "phases": phases,
        "total": chain[-1] - chain[0],
        "wall": wall,
        "loadavg": list(load),
        "time": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def check(r):
    """Problems with a record; empty when it is sane."""
    bad = []
    if r["attempt"] != 1:
        bad.append("the result came from attempt %d, not the restart" % r["attempt"])
    if not (1 <= r["resumed_from"] <= r["kill_step"] + 1):
        bad.append("resumed from step %d (killed after step %d)" % (r["resumed_from"], r["kill_step"]))
    if r["losses"] != r["steps"]:
        bad.append("%d losses for %d steps" % (r["losses"], r["steps"]))
    if not (r["max_weight_diff"] <= 1e-5 and r["max_loss_diff"] <= 1e-5):
        bad.append("weights (%.3g) or losses (%.3g) differ from the replay" % (r["max_weight_diff"], r["max_loss_diff"]))
    for k, v in r["phases"].items():
        if not v > 0:
            bad.append("phase %s took %.6f s" % (k, v))
    return bad


def percentile(xs, q):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def table(rows):
    groups = collections.defaultdict(list)
    for r in rows:
        if r.get("bench") == "elastic-restart":
            groups[(r["backend"], r["np"])].append(r)
    out = []
    for (backend, np_), rs in sorted(groups.items()):
        load = [r["loadavg"][0] for r in rs]
        mi = sorted({r["monitor_interval"] for r in rs})
        out.append("### %s, %d processes: %d trials (monitor interval %s s; load average %.1f-%.1f, median %.1f)\n"
                   % (backend, np_, len(rs), "/".join("%g" % m for m in mi), min(load), max(load), percentile(load, 50)))
        out.append("| phase | p50 (s) | p99 (s) | min (s) | max (s) |")
        out.append("|---|---:|---:|---:|---:|")
        for name in PHASES + ("total",):
            xs = [r["total"] if name == "total" else r["phases"][name] for r in rs]
            label = "**kill to first collective**" if name == "total" else name
            out.append("| %s | %.3f | %.3f | %.3f | %.3f |" % (label, percentile(xs, 50), percentile(xs, 99), min(xs), max(xs)))
        out.append("")
    return "\n".join(out)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2:])
    if len(sys.argv) > 2 and sys.argv[1] == "--agent":
        return agent(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", default="4,8", help="process counts, comma-separated")
    ap.add_argument("--backends", default="occl", help="occl, gloo or both, comma-separated")
    ap.add_argument("--trials", type=int, default=30, help="trials per backend and process count")
    ap.add_argument("--first-trial", type=int, default=0, help="number of the first trial (to add trials to a file)")
    ap.add_argument("--steps", type=int, default=12, help="training steps of the job")
    ap.add_argument("--kill-step", type=int, default=6, help="the last rank dies after this step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--monitor-interval", type=float, default=5.0, help="torchrun's --monitor_interval (its default: 5)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per trial")
    ap.add_argument("--out", default=None, help="JSONL file (default bench/results/elastic-restart-<date>.jsonl)")
    ap.add_argument("--table", metavar="FILE", help="print the table of a results file and exit")
    args = ap.parse_args()
    if args.table:
        print(table(read_jsonl(args.table)))
        return
    if not 0 <= args.kill_step < args.steps - 1:
        ap.error("--kill-step must be below --steps - 1")
    out = args.out or os.path.join(ROOT, "bench", "results", "elastic-restart-%s.jsonl" % datetime.date.today().isoformat())
    nps = [int(x) for x in args.np.split(",")]
    backends = args.backends.split(",")
    references = {}
    rows, failed = [], 0
    # Interleaved: every configuration once per round, so that a noisy
    # moment of the shared machine hits them alike.
    for n in range(args.first_trial, args.first_trial + args.trials):
        for np_ in nps:
            if np_ not in references:
                references[np_] = replay(np_, args.steps, args.lr)
            for backend in backends:
                r = trial(args, backend, np_, n, references[np_])
                bad = check(r)
                r["ok"] = not bad
                failed += bool(bad)
                with open(out, "a") as f:
                    f.write(json.dumps(r) + "\n")
                rows.append(r)
                print("%s np=%d trial %d: kill to first collective %.3f s (%s)%s" % (
                    backend, np_, n, r["total"], ", ".join("%s %.3f" % (k, v) for k, v in r["phases"].items()),
                    "" if not bad else "  BAD: " + "; ".join(bad)), flush=True)
    print()
    print(table(rows))
    print("records appended to %s" % out)
    if failed:
        sys.exit("%d trial(s) failed their checks" % failed)


if __name__ == "__main__":
    main()
