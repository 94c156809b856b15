"""Decoupled reinforcement learning: a player process collects experience, a trainer process learns from it.

The two roles talk through ``TorchCollective`` (``fabric_core.plugins.collectives``) instead of the gradient
all-reduce of data-parallel training: rank 0, the player, acts in a small contextual-bandit environment with the
current policy and sends what it saw to rank 1; rank 1, the trainer, takes a policy-gradient (REINFORCE) step on
it and broadcasts the new weights back; it also sends its loss to the player over a group of its own, as a
trainer reports metrics to the process that logs them. The script starts its two processes itself:

    python examples/rl_collective.py

``fabric.launch()`` starts the second process and creates the default process group (gloo);
``TorchCollective().setup()`` then finds that group and uses it. (Set ``MASTER_PORT`` to choose its port.)
The player prints the mean reward per iteration (chance is 1/3; the best policy earns 1); at the end both
processes print a fingerprint of their policy's parameters, which are equal.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch
from torch import Tensor, nn

from fabric_core import Fabric
from fabric_core.plugins.collectives import TorchCollective

FEATURES, ACTIONS = 4, 3
PLAYER, TRAINER = 0, 1


def best_actions(states: Tensor) -> Tensor:
    """The environment's hidden rule: which of the three actions pays for a given state."""
    rule = torch.randn(FEATURES, ACTIONS, generator=torch.Generator().manual_seed(0))
    return (states @ rule).argmax(1)


def flat(policy: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()])


def load_flat(policy: nn.Module, values: Tensor) -> None:
    torch.nn.utils.vector_to_parameters(values, policy.parameters())


def player(world: TorchCollective, metrics: TorchCollective, policy: nn.Module, args: argparse.Namespace) -> None:
    env = torch.Generator().manual_seed(1)
    weights = flat(policy)
    for iteration in range(args.iterations):
        states = torch.randn(args.batch, FEATURES, generator=env)
        with torch.no_grad():
            actions = torch.multinomial(torch.softmax(policy(states), 1), 1).squeeze(1)
        rewards = (actions == best_actions(states)).float()
        experience = torch.cat([states, actions[:, None].float(), rewards[:, None]], 1)
        world.send(experience, dst=TRAINER)
        world.broadcast(weights, src=TRAINER)  # the trainer's updated policy
        load_flat(policy, weights)
        loss = metrics.broadcast(torch.zeros(1), src=TRAINER)
        if iteration % 10 == 0 or iteration == args.iterations - 1:
            line = f"iteration {iteration:3d}: mean reward {rewards.mean():.3f}  trainer loss {loss.item():.4f}\n"
            sys.stdout.write(line)  # one write per line: see the end of main()
            sys.stdout.flush()


def trainer(world: TorchCollective, metrics: TorchCollective, policy: nn.Module, args: argparse.Namespace) -> None:
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    experience = torch.empty(args.batch, FEATURES + 2)
    for _ in range(args.iterations):
        world.recv(experience, src=PLAYER)
        states, actions, rewards = experience[:, :FEATURES], experience[:, FEATURES].long(), experience[:, -1]
        log_probs = torch.log_softmax(policy(states), 1).gather(1, actions[:, None]).squeeze(1)
        loss = -((rewards - rewards.mean()) * log_probs).mean()  # REINFORCE with the batch mean as baseline
        optimizer.zero_grad()
        torch.autograd.backward(loss)  # a plain backward: this policy is not wrapped by a strategy
        optimizer.step()
        world.broadcast(flat(policy), src=TRAINER)
        metrics.broadcast(loss.detach().reshape(1), src=TRAINER)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()  # starts the second process
    if fabric.world_size != 2:
        raise SystemExit(f"rl_collective.py needs 2 processes (a player and a trainer), got {fabric.world_size}")
    world = TorchCollective().setup()  # the default group, which fabric.launch() created
    metrics = TorchCollective().create_group(ranks=[PLAYER, TRAINER])  # a group of its own, for the metrics
    fabric.seed_everything(42, verbose=False)  # both processes start from the same policy
    policy = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, ACTIONS))
    if fabric.global_rank == PLAYER:
        player(world, metrics, policy, args)
    else:
        trainer(world, metrics, policy, args)
    fingerprint = hashlib.sha256(flat(policy).numpy().tobytes()).hexdigest()[:16]
    # One write per line: print() writes the text and the newline separately, and unbuffered (PYTHONUNBUFFERED)
    # the other process's line can land between them.
    role = "player" if fabric.global_rank == PLAYER else "trainer"
    sys.stdout.write(f"rank {fabric.global_rank} ({role}): policy {fingerprint}\n")
    sys.stdout.flush()
    metrics.teardown()


if __name__ == "__main__":
    main()
