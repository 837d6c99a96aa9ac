"""TRL on deskgym: ``deskgym.trl.DesktopEnvironment`` driven by TRL's own ``GRPOTrainer``
(two optimisation steps on CPU, real desktops, a tiny randomly initialised Qwen3 model
built here from a config and a tokenizer trained here: nothing is downloaded), and a
chat export of a recorded run loaded by ``datasets`` and trained on by ``SFTTrainer``."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest

import deskgym
import deskgym.datasets as ds
from deskgym.dialect import parse_actions
from deskgym.trl import DesktopEnvironment

trl = pytest.importorskip("trl", reason="the [train] extra (trl, transformers) is not installed")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

SCREEN = (160, 120)


def _target(tree: str, name: str = "red circle") -> tuple[int, int]:
    """The centre of the element called ``name`` in a tree's text (``... @x,y wxh``)."""
    line = next(ln for ln in tree.splitlines() if f'"{name}"' in ln)
    at, size = line.rsplit("@", 1)[1].split()
    x, y = (int(v) for v in at.split(","))
    w, h = (int(v) for v in size.split("x"))
    return x + w // 2, y + h // 2


# --- the environment class on its own -----------------------------------------------------


def test_a_solved_episode_scores_the_desktops_reward(address: str) -> None:
    """Reset from a dataset row, act through the tools, read the reward: the task's own."""
    env_cls = DesktopEnvironment.factory("click-target", address=address, screen=SCREEN, a11y=True)
    env = env_cls()
    try:
        first = env.reset(prompt=[{"role": "user", "content": "go"}], seed=4)
        assert isinstance(first, list) and first[1]["type"] == "image"
        assert first[1]["image"].size == SCREEN, "the screenshot is a PIL image of the screen"
        x, y = _target(first[0]["text"])
        out = env.click(x, y)
        assert "ended (success)" in out[0]["text"]
        with pytest.raises(RuntimeError, match="has ended"):
            env.click(x, y)  # TRL hands this message to the model
        assert env.get_reward() == 1.0
        assert env.episodes[-1] == {"task": "click-target", "seed": 4, "reward": 1.0, "status": "scored",
                                    "cause": "", "steps": 1, "ended": "success"}
        # The same row starts the same screen (a GRPO group); a miss scores 0, not None.
        again = env.reset(prompt=[{"role": "user", "content": "go"}], seed=4)
        assert _target(again[0]["text"]) == (x, y)
        with pytest.raises(ValueError, match="outside"):
            env.click(SCREEN[0] + 5, 1)  # the model's mistake: the run stays valid
        env.click(1, SCREEN[1] - 1)
        assert env.get_reward() == 0.0 and env.episodes[-1]["status"] == "scored"
    finally:
        env_cls.close_all()


def test_an_invalid_run_has_no_reward(address: str, client: deskgym.Client) -> None:
    """A desktop that goes away under a rollout makes the run invalid: ``None``, never 0."""
    env_cls = DesktopEnvironment.factory("click-target", address=address, screen=SCREEN)
    env = env_cls()
    try:
        env.reset(prompt="p")
        assert env._env is not None
        env._env.client.close_pool(env._env._pool.pool_id)  # type: ignore[union-attr]
        with pytest.raises(RuntimeError, match="does not count"):
            env.click(5, 5)
        assert env.get_reward() is None
        ep = env.episodes[-1]
        assert ep["status"] == "invalid" and ep["reward"] is None and "NOT_FOUND" in ep["cause"]
    finally:
        env_cls.close_all()


def test_a_desktop_that_crashes_under_a_rollout_is_invalid_not_zero(address: str) -> None:
    """A crash (the display killed) is the server's fault, not the model's: the tool call
    raises and the run has no reward (a truncated episode would have read as a 0)."""
    from test_client import _xvfb_pid

    env_cls = DesktopEnvironment.factory("click-target", address=address, screen=SCREEN)
    env = env_cls()
    try:
        env.reset(prompt="p", seed=3)
        assert env._env is not None
        extra = env._env.client.reset(env._env.env_id, seed=3).info.extra
        os.kill(_xvfb_pid(int(extra["display"].lstrip(":"))), signal.SIGKILL)
        with pytest.raises(RuntimeError, match="does not count"):
            for _ in range(20):  # the first call after the kill may still be answered
                env.click(1, 1)
        assert env.get_reward() is None
        ep = env.episodes[-1]
        assert ep["status"] == "invalid" and ep["reward"] is None, ep
    finally:
        env_cls.close_all()


def test_bad_options_are_refused() -> None:
    with pytest.raises(deskgym.DeskgymError, match="a11y=True"):
        DesktopEnvironment(images=False)
    with pytest.raises(deskgym.DeskgymError, match="obs_type"):
        DesktopEnvironment(obs_type="png")
    with pytest.raises(deskgym.DeskgymError, match="task"):
        DesktopEnvironment.factory(42)  # type: ignore[arg-type]


def test_the_tools_are_the_action_verbs_with_schemas_a_model_reads() -> None:
    """What TRL lists as tools (the class's public functions) and the JSON schema
    transformers builds from each one's hints and docstring."""
    import inspect

    from transformers.utils import get_json_schema

    tools = [n for n, _ in inspect.getmembers(DesktopEnvironment.factory("click-target"), inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(tools) == sorted(deskgym.trl.TOOLS)
    drag = get_json_schema(DesktopEnvironment.drag)["function"]
    assert drag["parameters"]["required"] == ["x", "y", "to_x", "to_y"]
    assert drag["parameters"]["properties"]["to_x"]["type"] == "integer"
    scroll = get_json_schema(DesktopEnvironment.scroll)["function"]
    assert scroll["parameters"]["required"] == ["x", "y", "dy"], "dx has a default"


# --- TRL's GRPOTrainer -------------------------------------------------------------------

#: Special tokens of the Qwen3 chat template TRL ships (and parses tool calls of).
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
           "<tool_response>", "</tool_response>"]


def _call_bodies(points: list[tuple[int, int]]) -> list[str]:
    """Tool-call bodies (Qwen3's JSON between ``<tool_call>`` and ``</tool_call>``), one
    token each, so that a few biased tokens make a well-formed call."""
    out = [f'\n{{"name": "click", "arguments": {{"x": {x}, "y": {y}}}}}\n' for x, y in points]
    out += ['\n{"name": "type_text", "arguments": {"text": "hi"}}\n',
            '\n{"name": "key", "arguments": {"keys": "Return"}}\n',
            '\n{"name": "click", "arguments": {"x": 999, "y": 5}}\n']  # off the screen: the model's error
    return out


def _tool_call_bias(tokenizer: Any, bodies: list[str]) -> list[list[Any]]:
    """``sequence_bias`` for generation (a GRPOConfig ``generation_kwargs`` setting, in
    the JSON-friendly list form): a randomly initialised model would write a parseable
    call once in millions of tokens; biased towards ``<tool_call>``, then a body, then
    ``</tool_call>``, then ``<|im_end|>``, it writes one in a few dozen tokens. The model's
    weights stay random and nothing of TRL or deskgym is patched: TRL parses, calls,
    answers and trains as it does for any model."""
    ids = tokenizer.convert_tokens_to_ids
    open_, close, end = ids("<tool_call>"), ids("</tool_call>"), ids("<|im_end|>")
    bias: list[list[Any]] = [[[open_], 3.0], [[close, end], 5.0]]
    for b in bodies:
        bias += [[[open_, ids(b)], 8.0], [[ids(b), close], 10.0]]
    return bias


def tiny_tokenizer(extra_tokens: list[str]) -> Any:
    """A byte-level BPE trained here on a few chat renderings, with Qwen3's chat template
    (TRL's copy) and special tokens: no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [json.dumps({"name": n, "arguments": {"x": 1, "y": 2}}) for n in deskgym.trl.TOOLS]
    corpus += ["Task: Click the red circle. The screen is 160x120 pixels; tools take pixel coordinates",
               'e1 application "deskgym tasks" frame label panel "blue square" [click] @28,41 8x8', "Done."]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL[1:])
    fast.add_tokens(extra_tokens)
    fast.chat_template = qwen3_chat_template
    return fast


def tiny_model(vocab_size: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
                         tie_word_embeddings=True)
    return Qwen3ForCausalLM(config)


def test_grpo_trains_two_steps_on_real_desktops(address: str, tmp_path: pathlib.Path) -> None:
    """TRL's GRPOTrainer, unchanged, with ``environment_factory``: its rollouts' tool
    calls step real desktops, and the rewards it trains on are the desktops' own."""
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer

    set_seed(0)
    # Click targets of the dataset's seeds are among the call tokens, so a lucky random
    # call can score 1 as well as 0.
    probe_cls = DesktopEnvironment.factory("click-target", address=address, screen=SCREEN, a11y=True, images=False)
    probe = probe_cls()
    seeds = [11, 12]
    targets = [_target(str(probe.reset(prompt="p", seed=s))) for s in seeds]
    probe_cls.close_all()
    bodies = _call_bodies(targets + [(10, 100), (80, 60)])
    tokenizer = tiny_tokenizer(bodies)
    model = tiny_model(len(tokenizer))
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Solve the task on the screen."}], "seed": s}
                                 for s in seeds])
    env_cls = DesktopEnvironment.factory("click-target", address=address, screen=SCREEN, a11y=True, images=False,
                                         max_steps=4)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=384, max_tool_calling_iterations=4, learning_rate=1e-3, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0,
                      chat_template_kwargs={"enable_thinking": False},
                      generation_kwargs={"sequence_bias": _tool_call_bias(tokenizer, bodies)})
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, train_dataset=dataset, args=args,
                          environment_factory=env_cls)
    try:
        trainer.train()
        envs = [e for e in trainer._environment_pool[None] if e.episodes]
    finally:
        env_cls.close_all()
    logs = [h for h in trainer.state.log_history if "rewards/DesktopEnvironment/mean" in h]
    assert len(logs) == 2 and trainer.state.global_step == 2
    episodes = [ep for e in envs for ep in e.episodes]
    assert len(episodes) == 4, "two optimisation steps, two rollouts each"
    assert all(ep["status"] == "scored" for ep in episodes), episodes
    # The rewards TRL logged are the desktops' returns, step by step (rollout i of each
    # batch ran on pooled instance i).
    for k, log in enumerate(logs):
        batch = [e.episodes[k]["reward"] for e in envs]
        assert len({e.episodes[k]["seed"] for e in envs}) == 1, "a GRPO group starts from one screen"
        assert log["rewards/DesktopEnvironment/mean"] == pytest.approx(sum(batch) / len(batch))
    # The model's tool calls reached the desktops: the server counted the actions.
    ran = sum(ep["steps"] for ep in episodes)
    calls = sum(h.get("tools/call_frequency", 0) for h in logs)
    assert ran > 0 and calls > 0, (episodes, logs)
    print(f"\nGRPO: {ran} actions ran on the desktops; rewards {[ep['reward'] for ep in episodes]}; logs {logs}")


# --- chat export and SFTTrainer ------------------------------------------------------------


def test_a_recorded_run_exports_as_chat_and_sft_trains_on_it(address: str, tmp_path: pathlib.Path) -> None:
    """A run recorded by the server, exported with ``--format chat``: ``datasets`` loads it
    (messages, images decoded to PIL), every assistant turn parses back to the recorded
    action, and TRL's SFTTrainer runs a step on the text-only export."""
    from datasets import load_dataset
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    env = deskgym.make("click-target", address=address, screen=SCREEN, record=f"t-{uuid.uuid4().hex[:10]}",
                       max_steps=3, obs_type="rgb+a11y")
    actions = []
    try:
        for seed in (1, 2):
            obs, _ = env.reset(seed=seed)
            x, y = _target(obs["a11y"])
            actions += [{"verb": "type_text", "text": "a\n"}, {"verb": "click", "x": 1, "y": SCREEN[1] - 1},
                        {"verb": "click", "x": x, "y": y}]
            for a in actions[-3:]:
                env.step(a)
    finally:
        env.close()
    bundle = env.recording_path
    r = subprocess.run([sys.executable, "-m", "deskgym.datasets", "export", "--format", "chat", bundle,
                        str(tmp_path / "chat")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = load_dataset("parquet", data_files=str(tmp_path / "chat" / "data" / "*.parquet"), split="train")
    assert len(d) == 6 and d[0]["images"][0].size == SCREEN
    assert [m["role"] for m in d[0]["messages"]] == ["system", "user", "assistant"]
    assert [c["type"] for c in d[0]["messages"][1]["content"]] == ["text", "image"]
    assert d[2]["success"] and d[2]["episode_return"] == 1.0 and d[2]["reward"] == 1.0
    assert "type_text(text='a\\n')" in d[1]["messages"][1]["content"][0]["text"], "the history so far"
    for row, action in zip(d, actions):
        call = row["messages"][2]["tool_calls"][0]["function"]
        text = f'<tool_call>{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}</tool_call>'
        assert parse_actions(text) == [action]

    xml = ds.export(bundle, tmp_path / "xml", "chat", dialect="xml", images=False)
    t = load_dataset("parquet", data_files=str(xml / "data" / "*.parquet"), split="train")
    assert "images" not in t.column_names
    assert [parse_actions(row["messages"][2]["content"][0]["text"])[0] for row in t] == actions

    # One SFT step on the text-only export, with a tiny local model.
    set_seed(0)
    tokenizer = tiny_tokenizer([])
    model = tiny_model(len(tokenizer))
    texts = t.map(lambda row: {"messages": [{"role": m["role"], "content": m["content"][0]["text"]}
                                            for m in row["messages"]]}, remove_columns=t.column_names)
    args = SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=1, per_device_train_batch_size=2, report_to="none",
                     save_strategy="no", use_cpu=True, bf16=False, logging_steps=1, max_length=512)
    trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=texts, args=args)
    trainer.train()
    assert trainer.state.global_step == 1
    assert trainer.state.log_history[0]["loss"] > 0
