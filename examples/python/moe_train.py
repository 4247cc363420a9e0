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
"""

import argparse
import os
import sys
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
    return ap.parse_args()


def main():
    args = parse_args()
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
    dist.init_process_group("occl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)  # the same gates and data layout everywhere ...
    gates = [torch.nn.Linear(args.dim, n) for _ in range(args.layers)]
    torch.manual_seed(100 + rank)  # ... and this rank's own experts and tokens
    experts = [
        torch.nn.Sequential(torch.nn.Linear(args.dim, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, args.dim))
        for _ in range(args.layers)
    ]
    params = [p for m in gates + experts for p in m.parameters()]
    gate_params = [p for g in gates for p in g.parameters()]
    opt = torch.optim.SGD(params, lr=args.lr)
    # Popular experts per layer: expert (3 l + k) % n gets bias skew / (k+1).
    bias = torch.zeros(args.layers, n)
    for l in range(args.layers):
        for k in range(3):
            bias[l, (3 * l + k) % n] += args.skew / (k + 1)

    a2a_time = [0.0] * args.layers

    def all_to_all(out_rows, x, send, recv):
        out = torch.empty(out_rows, x.shape[1])
        return dnn.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)

    def layer(l, x, timed, before_dispatch=None):
        logits = gates[l](x) + bias[l]
        prob, choice = torch.softmax(logits, dim=1).max(dim=1)
        order = torch.argsort(choice)
        send_counts = torch.bincount(choice, minlength=n)
        if before_dispatch is not None:
            before_dispatch()  # the reconfiguration must be done before the next collective
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        send, recv = send_counts.tolist(), recv_counts.tolist()
        occl.torch.set_traffic_tag("layer%d" % l)
        if timed:
            dist.barrier()  # time the all-to-alls, not the ranks' skew before them
        t0 = time.perf_counter()
        tokens = all_to_all(sum(recv), x[order], send, recv)  # dispatch
        t1 = time.perf_counter()
        y = experts[l](tokens)
        t2 = time.perf_counter()
        back = all_to_all(sum(send), y, recv, send)  # combine
        t3 = time.perf_counter()
        occl.torch.set_traffic_tag(None)
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
                pending = occl.torch.reconfigure(targets[l], async_op=True)  # overlaps the gate
            h = layer(l, h, timed, pending.wait if pending else None)
        loss = torch.nn.functional.mse_loss(h, target)
        opt.zero_grad()
        loss.backward()
        # Gates are replicated: average their gradients (experts are per rank).
        for p in gate_params:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        opt.step()
        return loss.item()

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

    losses = [step() for _ in range(args.warmup_steps)]
    # Each layer's traffic, as every rank saw it, and circuits planned for it.
    base = occl.torch.topology()
    targets = [occl.torch.plan(occl.torch.traffic_matrix(tag="layer%d" % l), base) for l in range(args.layers)]
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
