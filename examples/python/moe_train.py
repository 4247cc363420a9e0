#!/usr/bin/env python3
"""Expert-parallel Mixture-of-Experts training on occl, with the optical
fabric rewired for every layer while the layer's gate computes.

    torchrun --nproc_per_node 8 examples/python/moe_train.py

Each rank holds one expert of every layer. A layer: the gate scores the
rank's tokens and sends each to its best expert (top-1), the ranks exchange
how many tokens go where (all_to_all_single of counts), dispatch the tokens
(all_to_all_single with uneven split sizes), run the experts and send the
results back (combine). The gate has a popularity bias that differs from
layer to layer, as real MoE models' do, so every layer has its own traffic
pattern.

The fabric is occl's emulated one (OCCL_TOPO, by default 2 ranks per host
with 2 optical ports per host; OCCL_EMULATE=1): links run at the
topology's bandwidths, and a circuit between two hosts is faster than the
electrical path. After a first training phase the script reads each
layer's traffic matrix (occl.torch.traffic_matrix), plans circuits for it
(occl.torch.plan) and trains on, in two ways: with the circuits of the
first layer left in place, and reconfiguring before every layer
(occl.torch.reconfigure(..., async_op=True)) while its gate computes. It
prints each layer's all-to-all time both ways. With OCCL_OCS_ADDR set, an
occl-ocsd switches real (or emulated) circuits; without it, the emulated
fabric is rewired directly.

A rank that dies, survived in place:

    examples/python/moe_train.py --nproc 4 --kill-rank 2 --at-layer 1

starts 4 processes itself on 127.0.0.1 (env://): torchrun would stop every
worker when one dies. After the first phase, rank 2 kills itself (SIGKILL)
in the dispatch of layer 1. The others get a RuntimeError naming it, make
the group of the survivors with occl.torch.shrink, re-place its experts on
a survivor (re-initialised from their seed: the weights the dead rank had
trained are lost with it), run the interrupted step again and train on,
with circuits re-planned for the survivors' traffic; every all-to-all of
tokens after the failure, forward and backward, is checked against
checksums its senders exchange first. It prints the time to detect the
failure, to recover, and each later layer's all-to-all time. With --spare
one more process starts and waits; after the shrink it joins the survivors
(occl.torch.grow and occl.torch.join) in the dead rank's place in the
fabric and holds its experts.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

DEFAULT_TOPO = "hosts={hosts}x2,nics=host,ocs_ports=2,hbd=2GB/s,eps=100MB/s,ocs=100MB/s"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per rank per step")
    ap.add_argument("--dim", type=int, default=128, help="model dimension")
    ap.add_argument("--hidden", type=int, default=128, help="expert hidden dimension")
    ap.add_argument("--warmup-steps", type=int, default=3, help="steps before the traffic is read")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per pass")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--skew", type=float, default=3.0, help="gate bias towards each layer's popular experts")
    ap.add_argument("--nproc", type=int, default=0,
                    help="start this many processes on 127.0.0.1 (env://) instead of running under torchrun")
    ap.add_argument("--kill-rank", type=int, default=None,
                    help="this rank dies (SIGKILL) after the first phase; the others shrink and train on (needs --nproc)")
    ap.add_argument("--at-layer", type=int, default=0, help="the layer in whose dispatch --kill-rank dies")
    ap.add_argument("--spare", action="store_true", help="with --kill-rank: one more process joins in its place")
    ap.add_argument("--time-limit", type=float, default=600, help="seconds --nproc waits for its processes")
    return ap.parse_args()


def free_port():
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spare_topology(t, dead):
    """Topology t (a dict) with rank dead moved to the end, where the spare
    takes its place, and no circuits: the grown group's."""
    t = json.loads(json.dumps(t))
    ranks = [t["ranks"][r] for r in range(len(t["ranks"])) if r != dead] + [t["ranks"][dead]]
    local = {}
    for rk in ranks:
        rk["local_rank"] = local.get(rk["host"], 0)
        local[rk["host"]] = rk["local_rank"] + 1
    t["ranks"] = ranks
    t.pop("circuits", None)
    return t


def publish(name, text):
    """Writes a file of the run's directory at once (a rename)."""
    d = os.environ["OCCL_MOE_DIR"]
    with open(os.path.join(d, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))


def launch(args):
    """Runs the script on args.nproc processes with env:// variables (and,
    with --spare, one more process, the spare) and waits for them: every
    process must succeed but --kill-rank, which must die of SIGKILL.
    Returns the exit status."""
    n = args.nproc
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(n),
               LOCAL_WORLD_SIZE=str(n), OMP_NUM_THREADS="1", OCCL_MOE_LAUNCHED="1")
    env.setdefault("OCCL_TOPO", DEFAULT_TOPO.format(hosts=max(n // 2, 1)))
    env.setdefault("OCCL_EMULATE", "1")
    with tempfile.TemporaryDirectory(prefix="occl-moe-") as d:
        env["OCCL_MOE_DIR"] = d
        procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(n)]
        if args.spare:
            procs.append(subprocess.Popen([sys.executable] + sys.argv, env=dict(env, OCCL_MOE_SPARE="1")))
        name = lambda r: "rank %d" % r if r < n else "the spare"
        deadline = time.monotonic() + args.time_limit
        bad = None
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            for r, p in enumerate(procs):
                code = p.poll()
                want = -signal.SIGKILL if r == args.kill_rank else 0
                if code is not None and code != want and bad is None:
                    bad = "%s exited with %d" % (name(r), code)
            if bad is not None:
                break
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if bad is None:
            for r, p in enumerate(procs):
                want = -signal.SIGKILL if r == args.kill_rank else 0
                if p.returncode != want:
                    bad = "%s exited with %d" % (name(r), p.returncode)
                    break
    if bad is not None:
        print("moe_train: %s" % bad, file=sys.stderr)
        return 1
    return 0


def main():
    args = parse_args()
    if args.spare and args.kill_rank is None:
        sys.exit("moe_train: --spare needs --kill-rank")
    if args.nproc > 0 and "OCCL_MOE_LAUNCHED" not in os.environ:
        sys.exit(launch(args))
    if args.kill_rank is not None and "OCCL_MOE_LAUNCHED" not in os.environ:
        sys.exit("moe_train: --kill-rank needs --nproc N: torchrun stops every worker when one dies")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if "OCCL_TOPO" not in os.environ:
        # The emulated fabric. occl reads the environment the process started
        # with, so start again with it.
        os.environ["OCCL_TOPO"] = DEFAULT_TOPO.format(hosts=max(world // 2, 1))
        os.environ.setdefault("OCCL_EMULATE", "1")
        os.execv(sys.executable, [sys.executable] + sys.argv)

    import torch
    import torch.distributed as dist
    import torch.distributed.nn.functional as dnn

    import occl.torch

    torch.set_num_threads(1)
    is_spare = "OCCL_MOE_SPARE" in os.environ
    if is_spare:
        # The spare stands in for the rank that dies: its experts' seed.
        rank, n = args.kill_rank, int(os.environ["WORLD_SIZE"])
    else:
        dist.init_process_group("occl")
        rank, n = dist.get_rank(), dist.get_world_size()
    kill = args.kill_rank
    if kill is not None and not (0 <= kill < n and 0 <= args.at_layer < args.layers and n >= 3):
        sys.exit("moe_train: --kill-rank must be a rank of %d (3 or more) and --at-layer a layer of %d" % (n, args.layers))
    torch.manual_seed(1)  # the same gates and data layout everywhere ...
    gates = [torch.nn.Linear(args.dim, n) for _ in range(args.layers)]

    def make_experts():
        return [
            torch.nn.Sequential(torch.nn.Linear(args.dim, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, args.dim))
            for _ in range(args.layers)
        ]

    torch.manual_seed(100 + rank)  # ... and this rank's own experts and tokens
    # experts[l][e]: expert e of layer l, for the experts this rank holds.
    experts = [{rank: m} for m in make_experts()]
    gate_params = [p for g in gates for p in g.parameters()]

    def optimizer():
        return torch.optim.SGD(gate_params + [p for ex in experts for m in ex.values() for p in m.parameters()], lr=args.lr)

    opt = optimizer()
    # Popular experts per layer: expert (3 l + k) % n gets bias skew / (k+1).
    bias = torch.zeros(args.layers, n)
    for l in range(args.layers):
        for k in range(3):
            bias[l, (3 * l + k) % n] += args.skew / (k + 1)

    class Run:
        """The group the layers run on (None: the world group), its size,
        this rank's place in it, the rank holding each expert, whether
        all-to-alls are verified and how many were."""
        group, size, me = None, n, rank
        owner = list(range(n))
        verify, verified = False, 0
        die_at = None  # the layer in whose dispatch this rank dies

    run = Run()
    a2a_time = [0.0] * args.layers

    def checksums(blocks):
        """Two sums per block, in float64: of its elements and of its
        elements weighted by their position (catches a swap)."""
        out = torch.zeros(len(blocks), 2, dtype=torch.float64)
        for i, b in enumerate(blocks):
            f = b.detach().reshape(-1).double()
            out[i, 0] = f.sum()
            out[i, 1] = (f * (torch.arange(f.numel(), dtype=torch.float64) % 7 + 1)).sum()
        return out

    def exchange(x, send, recv):
        """all_to_all_single of x's rows, send[j] of them to rank j, recv[i]
        from rank i, on the current group; verified against the senders'
        checksums when run.verify is set."""
        x = x.contiguous()
        out = torch.empty(sum(recv), *x.shape[1:], dtype=x.dtype)
        if run.verify:
            mine = checksums(x.split(send))
            theirs = torch.empty_like(mine)
            dist.all_to_all_single(theirs, mine, group=run.group)
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send, group=run.group)
        if run.verify:
            got = checksums(out.split(recv))
            if not torch.equal(got, theirs):
                bad = [i for i in range(run.size) if not torch.equal(got[i], theirs[i])]
                raise RuntimeError("moe_train: rank %d: the blocks from ranks %s do not match their checksums" % (run.me, bad))
            run.verified += 1
        return out

    class AllToAll(torch.autograd.Function):
        """exchange, with the reverse exchange of the gradients."""

        @staticmethod
        def forward(ctx, x, send, recv):
            ctx.send, ctx.recv = send, recv
            return exchange(x, send, recv)

        @staticmethod
        def backward(ctx, g):
            return exchange(g, ctx.recv, ctx.send), None, None

    def die():
        """This rank's death: the time of it, for the survivors' report,
        then SIGKILL."""
        with open(os.path.join(os.environ["OCCL_MOE_DIR"], "fault"), "w") as f:
            f.write(str(time.time_ns()))
        os.kill(os.getpid(), signal.SIGKILL)

    def layer(l, x, timed, before_dispatch=None):
        m = run.size
        logits = gates[l](x) + bias[l]
        prob, choice = torch.softmax(logits, dim=1).max(dim=1)
        # Tokens ordered by the rank of their expert, then by expert.
        key = torch.tensor(run.owner)[choice] * n + choice
        order = torch.argsort(key)
        counts = torch.bincount(key, minlength=m * n).view(m, n)  # [rank, expert]
        if before_dispatch is not None:
            before_dispatch()  # the reconfiguration must be done before the next collective
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=run.group)
        send, recv = counts.sum(1).tolist(), recv_counts.sum(1).tolist()
        occl.torch.set_traffic_tag("layer%d" % l, group=run.group)
        if run.die_at == l:
            die()
        if timed:
            dist.barrier(group=run.group)  # time the all-to-alls, not the ranks' skew before them
        t0 = time.perf_counter()
        tokens = AllToAll.apply(x[order], send, recv)  # dispatch
        t1 = time.perf_counter()
        held = experts[l]
        if len(held) == 1:
            y = next(iter(held.values()))(tokens)
        else:
            # The expert of each received token: senders ordered them by expert.
            which = torch.arange(n).repeat(m).repeat_interleave(recv_counts.reshape(-1))
            y = torch.zeros_like(tokens)
            for e, ex in held.items():
                idx = (which == e).nonzero().squeeze(1)
                y = y.index_copy(0, idx, ex(tokens[idx]))
        t2 = time.perf_counter()
        back = AllToAll.apply(y, recv, send)  # combine
        t3 = time.perf_counter()
        occl.torch.set_traffic_tag(None, group=run.group)
        if timed:
            a2a_time[l] += (t1 - t0) + (t3 - t2)
        out = torch.empty_like(back)
        out[order] = back
        return x + prob.unsqueeze(1) * out

    def step(timed=False, targets=None):
        x = torch.randn(args.tokens, args.dim)
        target = torch.roll(x, 1, dims=1)
        h = x
        for l in range(args.layers):
            pending = None
            if targets is not None:
                pending = occl.torch.reconfigure(targets[l], async_op=True, group=run.group)  # overlaps the gate
            h = layer(l, h, timed, pending.wait if pending else None)
        loss = torch.nn.functional.mse_loss(h, target)
        opt.zero_grad()
        loss.backward()
        # Gates are replicated: average their gradients (experts are per rank).
        for p in gate_params:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=run.group)
        opt.step()
        return loss.item()

    def survive(targets, losses, world_topology):
        """The reconfigured pass in which rank kill dies in the dispatch of
        layer --at-layer: the survivors shrink, re-place its experts (on a
        survivor, or with --spare on a process that joins in its place),
        run the interrupted step again and train on, verifying every
        all-to-all of tokens."""
        nonlocal opt
        dead = kill
        if rank == 0:
            print("# moe_train: %d ranks, %s, %d layers, %d tokens x %d per rank" % (n, os.environ["OCCL_TOPO"], args.layers, args.tokens, args.dim))
            print("# fault: rank %d dies (SIGKILL) in the dispatch of layer %d, in the first step after %d warm-up steps%s"
                  % (dead, args.at_layer, args.warmup_steps, "; a spare waits to join" if args.spare else ""), flush=True)
        if rank == dead:
            run.die_at = args.at_layer
        try:
            step(targets=targets)
        except RuntimeError as e:
            err_at, t_err = time.time_ns(), time.perf_counter()
            if "rank %d:" % dead not in str(e):
                raise RuntimeError("rank %d: want an error naming rank %d" % (rank, dead)) from e
        else:
            raise RuntimeError("rank %d: every layer ran although rank %d was to die" % (rank, dead))
        # The survivors' group, made in place.
        pg = occl.torch.shrink()
        m, me = pg.size(), pg.rank()
        if m != n - 1:
            raise RuntimeError("rank %d: the shrunk group has %d ranks, want %d" % (rank, m, n - 1))
        first = torch.ones(1)
        dist.all_reduce(first, group=pg)  # the first collective of the survivors
        recovered = time.perf_counter() - t_err
        report = torch.tensor([err_at, -err_at, int(recovered * 1e9)], dtype=torch.int64)
        dist.all_reduce(report, op=dist.ReduceOp.MAX, group=pg)
        last_err, first_err, recovered = report[0].item(), -report[1].item(), report[2].item() / 1e9
        # Rank e > dead is now e - 1.
        owner = [e if e < dead else e - 1 for e in range(n)]
        lines = []
        if me == 0:
            with open(os.path.join(os.environ["OCCL_MOE_DIR"], "fault")) as f:
                fault = int(f.read())
            lines.append("# detected in %.2f ms (fault -> the dispatch raised a RuntimeError naming rank %d on the last survivor; first survivor %.2f ms)"
                         % ((last_err - fault) / 1e6, dead, (first_err - fault) / 1e6))
            lines.append("# recovered in %.2f ms (error -> first collective on the group of %d survivors made by occl.torch.shrink)" % (recovered * 1e3, m))
        if args.spare:
            # The spare joins in the dead rank's place in the fabric, as the
            # last rank of the grown group, and holds its experts.
            topology = spare_topology(world_topology, dead)
            if me == 0:
                publish("spare_topology", json.dumps(topology))
                publish("grow_id", str(occl.get_unique_id()))
            dist.barrier(group=pg)
            with open(os.path.join(os.environ["OCCL_MOE_DIR"], "grow_id")) as f:
                grow_id = f.read()
            grown = occl.torch.grow(grow_id, 1, group=pg, topology=topology)
            dist.all_reduce(first, group=grown)  # the first collective with the spare
            if occl.torch.topology(grown)["ranks"][n - 1]["host"] != world_topology["ranks"][dead]["host"]:
                raise RuntimeError("rank %d: the spare is not on rank %d's host" % (rank, dead))
            joined = torch.tensor([int((time.perf_counter() - t_err) * 1e9)], dtype=torch.int64)
            welcome(grown, joined)
            owner[dead] = n - 1
            if me == 0:
                lines.append("# spare joined in %.2f ms (error -> first collective on the grown group of %d ranks made by occl.torch.grow)" % (joined.item() / 1e6, n))
                lines.append("# expert %d of every layer now on rank %d (the spare, in rank %d's place in the fabric), re-initialised; the interrupted step runs again" % (dead, n - 1, dead))
            train_on(grown, owner, losses, lines, "none yet (grown group)")
            return
        # The survivor that took the dead rank's number holds its experts
        # too, re-initialised from their seed.
        heir = dead % m
        owner[dead] = heir
        if me == heir:
            with torch.random.fork_rng():
                torch.manual_seed(100 + dead)
                for l, ex in enumerate(make_experts()):
                    experts[l][dead] = ex
            opt = optimizer()
        if me == 0:
            lines.append("# expert %d of every layer now on rank %d of the survivors (was rank %d), re-initialised; the interrupted step runs again" % (dead, heir, heir if heir < dead else heir + 1))
        train_on(pg, owner, losses, lines, "as at the failure")

    def welcome(grown, joined):
        """The grown group's first steps: the gates (replicated) go from
        rank 0 to the spare, and the time the spare took to join becomes
        the slowest member's."""
        for p in gate_params:
            grown.broadcast(p.data, 0).wait()
        dist.all_reduce(joined, op=dist.ReduceOp.MAX, group=grown)

    def spare():
        """The spare process: it waits for the grow id, joins the survivors
        in the dead rank's place and trains on with them."""
        d = os.environ["OCCL_MOE_DIR"]
        deadline = time.monotonic() + args.time_limit
        while not os.path.exists(os.path.join(d, "grow_id")):
            if time.monotonic() > deadline:
                raise RuntimeError("spare: no grow id after %.0f s" % args.time_limit)
            time.sleep(0.01)
        with open(os.path.join(d, "grow_id")) as f:
            grow_id = f.read()
        with open(os.path.join(d, "spare_topology")) as f:
            topology = f.read()
        grown = occl.torch.join(grow_id, topology=topology)
        if (grown.rank(), grown.size()) != (n - 1, n):
            raise RuntimeError("spare: rank %d of %d, want %d of %d" % (grown.rank(), grown.size(), n - 1, n))
        dist.all_reduce(torch.ones(1), group=grown)
        welcome(grown, torch.zeros(1, dtype=torch.int64))
        owner = [e if e < kill else e - 1 for e in range(n)]
        owner[kill] = n - 1
        train_on(grown, owner, [], [], "")

    def train_on(group, owner, losses, lines, circuits):
        """Training after the failure on group: the interrupted step again,
        on the circuits in place (described by circuits), then steps with circuits planned for the
        group's own traffic before every layer, every all-to-all of tokens
        verified. Rank 0 prints lines, then each layer's times."""
        m, me = group.size(), group.rank()
        run.group, run.size, run.me, run.owner, run.verify = group, m, me, owner, True
        a2a_time[:] = [0.0] * args.layers
        times = []
        losses.append(step(timed=True))
        times.append(list(a2a_time))
        fabric = occl.torch.topology(group)
        replanned = [occl.torch.plan(occl.torch.traffic_matrix(group, tag="layer%d" % l), fabric) for l in range(args.layers)]
        for _ in range(max(args.steps - 1, 1)):
            a2a_time[:] = [0.0] * args.layers
            losses.append(step(timed=True, targets=replanned))
            times.append(list(a2a_time))
        # Dispatch, combine and their gradients, but for the first layer's
        # dispatch: its tokens are the input, which needs no gradient.
        want = (4 * args.layers - 1) * len(times)
        if run.verified != want:
            raise RuntimeError("rank %d: %d all-to-alls verified, want %d" % (me, run.verified, want))
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's
        if me == 0:
            for line in lines:
                print(line)
            print("# step  layer  ranks  a2a (ms)  circuits")
            for s, row in enumerate(times):
                for l, v in enumerate(row):
                    print("%6d %6d %6d %9.2f  %s" % (s + 1, l, m, v * 1e3, "re-planned for %d ranks" % m if s > 0 else circuits))
            print("# after recovery: %d steps x %d layers on %d ranks, %d all-to-alls of tokens (forward and backward), every one verified against its senders' checksums; loss %.4f -> %.4f"
                  % (len(times), args.layers, m, want, losses[0], losses[-1]), flush=True)
        dist.barrier(group=group)
    if is_spare:
        spare()
        return
    # A round trip through dispatch and combine returns every token: check it.
    x = torch.randn(64, args.dim)
    send = [(64 * (d + rank)) // (2 * n) % 17 for d in range(n)]
    send[-1] = 64 - sum(send[:-1])
    if send[-1] < 0:
        send = [64 // n] * n
        send[-1] += 64 - sum(send)
    counts = torch.tensor(send)
    recv_t = torch.empty_like(counts)
    dist.all_to_all_single(recv_t, counts)
    recv = recv_t.tolist()
    got = torch.empty(sum(recv), args.dim)
    dist.all_to_all_single(got, x, output_split_sizes=recv, input_split_sizes=send)
    back = torch.empty_like(x)
    dist.all_to_all_single(back, got, output_split_sizes=send, input_split_sizes=recv)
    assert torch.equal(back, x), "dispatch + combine did not return the tokens"

    world_topology = occl.torch.topology()
    losses = [step() for _ in range(args.warmup_steps)]
    # Each layer's traffic, as every rank saw it, and circuits planned for it.
    base = occl.torch.topology()
    targets = [occl.torch.plan(occl.torch.traffic_matrix(tag="layer%d" % l), base) for l in range(args.layers)]
    if kill is not None:
        survive(targets, losses, world_topology)
        return
    occl.torch.reconfigure(targets[0])
    static = []
    for _ in range(args.steps):
        losses.append(step(timed=True))
    static = list(a2a_time)
    a2a_time[:] = [0.0] * args.layers
    t0 = time.perf_counter()
    for _ in range(args.steps):
        losses.append(step(timed=True, targets=targets))
    wall = time.perf_counter() - t0
    dynamic = list(a2a_time)
    # The slowest rank's times.
    t = torch.tensor(static + dynamic, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    static, dynamic = t[: args.layers].tolist(), t[args.layers :].tolist()
    if rank == 0:
        print("# moe_train: %d ranks, %s, %d layers, %d tokens x %d per rank, %d steps per pass" % (n, os.environ["OCCL_TOPO"], args.layers, args.tokens, args.dim, args.steps))
        print("# loss %.4f -> %.4f over %d steps" % (losses[0], losses[-1], len(losses)))
        print("# layer  a2a static (ms/step)  a2a reconfigured (ms/step)  speedup")
        for l in range(args.layers):
            s, d = static[l] / args.steps * 1e3, dynamic[l] / args.steps * 1e3
            print("%7d  %20.2f  %26.2f  %7.2fx" % (l, s, d, s / d if d > 0 else float("nan")))
        s, d = sum(static) / args.steps * 1e3, sum(dynamic) / args.steps * 1e3
        print("# all    %20.2f  %26.2f  %7.2fx   (reconfigured pass: %.1f ms/step wall)" % (s, d, s / d, wall / args.steps * 1e3))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
