"""axstream on real desktops: the server's ``Drive`` stream, driven by model text in chunks."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import pytest

import deskgym
from deskgym import datasets as ds
from deskgym.agents.axstream import Executor, Report, parse_all

#: A model's two responses: the first ends its turn with observe, the second (written
#: after the observation) drags and finishes.
RESPONSE = (pathlib.Path(__file__).parent / "axstream" / "drag_response.txt").read_text()
RESPONSE_2 = (pathlib.Path(__file__).parent / "axstream" / "drag_response_2.txt").read_text()


@contextmanager
def episode(address: str, task: str, seed: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A 320x240 env of ``task`` reset to ``seed`` (its info beside it), closed after."""
    env = deskgym.make(task, address=address, screen=(320, 240))
    try:
        _, info = env.reset(seed=seed)
        yield env, info
    finally:
        env.close()


def chunks(text: str, n: int) -> list[str]:
    return [text[i:i + n] for i in range(0, len(text), n)]


def outline(reports: list[Report]) -> list[tuple[int, int, str, str, str]]:
    return [(r.line, r.burst, r.op, r.action, r.status) for r in reports]


@pytest.mark.spec(
    "axstream:2.buffer", "axstream:2.no-dedup", "axstream:3.burst", "axstream:6.3", "axstream:2.narration",
    "axstream:3.3.turn",
)
def test_a_recorded_response_runs_the_same_in_chunks_of_1_7_and_4096(address: str) -> None:
    env = deskgym.make("drag-to-zone", address=address, screen=(320, 240))
    try:
        runs = []
        for n in (1, 7, 4096):
            env.reset(seed=11)
            ex = Executor(env)
            reports = [r for c in chunks(RESPONSE, n) for r in ex.feed(c)]
            second = chunks(RESPONSE_2, n)
            reports += ex.feed(second[0], turn=True)
            reports += [r for c in second[1:] for r in ex.feed(c)] + ex.close()
            runs.append((outline(reports), env.client.observe(env.env_id).frame_hash, ex.verdict))
        first = runs[0][0]
        assert runs[1] == runs[0] and runs[2] == runs[0]
        # Every fence line, in order; the two identical waits both ran; narration and
        # the JSON inside it never did.
        text = RESPONSE + RESPONSE_2
        assert [r[0] for r in first] == [i + 1 for i, line in enumerate(text.split("\n")) if line.startswith("{")]
        assert [(op, act, st) for _, _, op, act, st in first] == [
            ("assert", "", "executed"), ("act", "move", "executed"), ("act", "wait", "executed"),
            ("act", "wait", "executed"), ("observe", "", "executed"),
            ("act", "drag", "executed"), ("done", "", "executed"),
        ]
        assert {r[1] for r in first} == {1, 2}
        assert runs[0][2] == ("success", "the square is in the zone")
        assert len(parse_all(RESPONSE)) + len(parse_all(RESPONSE_2)) == len(first)
    finally:
        env.close()


@pytest.mark.spec(
    "axstream:2.execute", "axstream:6.2", "axstream:3.3.observe", "axstream:3.3.turn", "axstream:6.5",
    "axstream:4.role-title",
)
def test_the_drag_solves_the_task_and_observe_returns_the_screen(address: str) -> None:
    env = deskgym.make("drag-to-zone", address=address, screen=(320, 240))
    try:
        _, info = env.reset(seed=12)
        ex = Executor(env, tree=True)
        reports = ex.feed(RESPONSE)
        # Without a new turn, the second response's lines are skipped: they were not
        # written after the observation.
        early = ex.feed(RESPONSE_2)
        assert {r.status for r in early} == {"skipped"} and "turn ended at observe on line 10" in early[0].reason
        reports += ex.feed(RESPONSE_2, turn=True)
        ex.close()
        observe = next(r for r in reports if r.op == "observe")
        assert observe.frame is not None and observe.frame.shape == (240, 320, 3)
        assert observe.tree is not None and observe.tree.find(role="panel", name="green zone")
        drag = next(r for r in reports if r.action == "drag")
        assert (drag.reward, drag.terminated) == (1.0, True)
        # Timings are ordered: received <= started <= finished, line after line.
        ran = [r for r in reports if r.status == "executed"]
        assert all(r.received_ms <= r.started_ms <= r.finished_ms for r in ran)
        assert all(a.finished_ms <= b.started_ms for a, b in zip(ran, ran[1:]))
    finally:
        env.close()


@pytest.mark.spec("axstream:2.buffer", "axstream:6.1")
def test_a_line_cut_by_the_end_of_the_stream_never_runs(address: str) -> None:
    env = deskgym.make("type-word", address=address, screen=(320, 240))
    try:
        _, info = env.reset(seed=3)
        ex = Executor(env)
        assert ex.feed('```\n{"op":"act","do":"type","text":"abc"}') == []
        done = ex.feed('\n{"op":"act","do":"type","text":"de"')
        assert [(r.line, r.status) for r in done] == [(2, "executed")]
        tail = ex.close()
        assert [(r.status, r.reason) for r in tail] == [("skipped", "cut: the stream ended before its newline")]
        typed = [r for r in ex.reports if r.status == "executed"]
        assert [r.text for r in typed] == ['{"op":"act","do":"type","text":"abc"}']
        # One step ran (the first line); the cut one did not.
        assert env.step({"verb": "noop"})[4]["step_index"] == 2
    finally:
        env.close()


@pytest.mark.spec(
    "axstream:2.narration", "axstream:2.json-lines", "axstream:6.4", "axstream:3.1.shorthand",
    "axstream:2.fence-open",
)
def test_narration_with_braces_and_invalid_lines_run_nothing(address: str) -> None:
    env = deskgym.make("click-target", address=address, screen=(320, 240))
    try:
        env.reset(seed=4)
        ex = Executor(env)
        reports = ex.feed(
            'Let me click {"op":"act","do":"click","target":{"x":5,"y":5}} first.\n'
            '{"op":"act","do":"click","target":{"x":5,"y":5}}\n'
            "```jsonl\n"
            '{"op":"act","do":"click","target":{"x":5}}\n'
            "not json at all\n"
            '{"op":"act","do":"click","target":{"x":9999,"y":5}}\n'
            '{"op":"act","do":"fly"}\n'
            '```json\n'
            '{"op":"wait","ms":10}\n'
            "```\n"
            '{"op":"act","do":"click","target":{"x":5,"y":5}}\n'
        )
        ex.close()
        assert [(r.line, r.status) for r in reports] == [
            (4, "skipped"), (5, "skipped"), (6, "skipped"), (7, "skipped"), (8, "skipped"), (9, "executed"),
        ]
        assert "needs both x and y" in reports[0].reason and reports[1].reason.startswith("not JSON")
        # An action the server refuses for its input is skipped with the server's reason.
        assert "outside the 320x240 screen" in reports[2].reason and reports[2].code == "INVALID_ARGUMENT"
        assert reports[5].action == "wait"  # the {"op": "<action>"} shorthand
        assert env.step({"verb": "noop"})[4]["step_index"] == 2
    finally:
        env.close()


@pytest.mark.spec("axstream:3.2.assert", "axstream:6.6")
def test_a_failed_assert_aborts_the_rest_of_its_burst_only(address: str) -> None:
    env = deskgym.make("click-button", address=address, screen=(320, 240))
    try:
        env.reset(seed=5)
        ex = Executor(env)
        reports = ex.feed(
            "```\n"
            '{"op":"assert","target":{"ax":{"role":"AXButton","title":"no such button"}}}\n'
            '{"op":"act","do":"wait","ms":10}\n'
            '{"op":"done","status":"success"}\n'
            "```\n```\n"
            '{"op":"act","do":"wait","ms":10}\n'
            '{"op":"assert","target":{"ax":{"role":"AXButton"}}}\n'
            '{"op":"assert","target":{"ax":{"id":"e999"}}}\n'
            "```\n"
        )
        ex.close()
        assert [(r.burst, r.op, r.status) for r in reports] == [
            (1, "assert", "failed"), (1, "act", "aborted"), (1, "done", "aborted"),
            (2, "act", "executed"), (2, "assert", "failed"), (2, "assert", "aborted"),
        ]
        assert reports[0].code == "FAILED_PRECONDITION" and "no element" in reports[0].reason
        assert reports[1].reason.startswith("line 2 (assert) did not resolve")
        # A role alone that several elements have is ambiguous, with the candidates.
        assert "elements match" in reports[4].reason
        assert ex.verdict is None
    finally:
        env.close()


@pytest.mark.spec("axstream:5.risk", "axstream:5.gate")
def test_risky_actions_are_held_unless_the_policy_allows_them(address: str) -> None:
    # Through gymnasium.make's wrappers, as a Gym user holds it.
    env = gym.make("deskgym/ClickTarget-v0", address=address, screen=(320, 240))
    burst = (
        "```\n"
        '{"op":"act","do":"wait","ms":10}\n'
        '{"op":"act","do":"key","keys":["cmd","a"],"risk":"risky"}\n'
        '{"op":"act","do":"wait","ms":10}\n'
        "```\n"
    )
    try:
        env.reset(seed=6)
        held = Executor(env).feed(burst)
        assert [r.status for r in held] == ["executed", "held", "aborted"]
        assert "risky" in held[1].reason and held[2].reason == "line 3 (risky) was held"
        allowed = Executor(env, policy="allow").feed(burst)
        assert [r.status for r in allowed] == ["executed"] * 3
        with pytest.raises(deskgym.DeskgymError) as e:
            Executor(env, policy="maybe")
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        env.close()


@pytest.mark.spec("axstream:3.4.done", "axstream:4.role-title", "axstream:6.5")
def test_a_scripted_model_solves_click_button_and_the_verdict_is_recorded(address: str) -> None:
    env = deskgym.make("click-button", address=address, screen=(320, 240), record=f"axstream-{id(address)}")
    try:
        _, info = env.reset(seed=7)
        label = info["instruction"].split('"')[1]

        def model() -> list[str]:
            # A "model" that writes a few characters at a time, narration first.
            text = (
                f"The instruction asks for the button labelled {label!r}; I'll click it.\n"
                "```jsonl\n"
                f'{{"op":"act","do":"click","target":{{"ax":{{"role":"AXButton","title":"{label}"}}}}}}\n'
                '{"op":"done","status":"success","reason":"clicked it"}\n'
                "```\n"
            )
            return chunks(text, 5)

        ex = Executor(env)
        reports = list(ex.run(model()))
        click, done = reports
        assert (click.status, click.reward, click.terminated) == ("executed", 1.0, True)
        assert done.status == "executed" and done.extra["agent_status"] == "success"
        assert done.extra["agent_reason"] == "clicked it"
        path = env.unwrapped.recording_path
    finally:
        env.close()
    events = ds.open(path)["events"].to_pylist()
    verdicts = [e for e in events if e["kind"] == "agent_done"]
    assert len(verdicts) == 1 and '"status":"success"' in verdicts[0]["payload"].replace(" ", "")


def test_a_bad_first_message_is_a_clear_error(address: str) -> None:
    c = deskgym.Client(address)
    try:
        with pytest.raises(deskgym.DeskgymError) as e:
            Executor((c, "no-such-env"))
        assert e.value.code == "NOT_FOUND"
    finally:
        c.close()


@pytest.mark.spec("axstream:x.line-limit")
def test_drive_refuses_bad_first_messages_and_oversized_text_on_the_wire(address: str) -> None:
    import grpc

    from deskgym.v1 import deskgym_pb2 as pb

    env = deskgym.make("click-target", address=address, screen=(320, 240))
    try:
        env.reset(seed=0)
        stub, env_id = env.client._stub, env.env_id

        def drive(*msgs: pb.DriveRequest) -> grpc.RpcError:
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Drive(iter(msgs), timeout=30))
            return e.value

        e = drive(pb.DriveRequest(env_id=env_id, risky=7))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "risky" in e.details()
        e = drive()
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "no message" in e.details()
        e = drive(pb.DriveRequest(env_id=env_id), pb.DriveRequest(text="x" * ((1 << 20) + 1)))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "smaller chunks" in e.details()
        # A line over 64 KiB is skipped (never buffered whole); the stream goes on.
        ex = Executor(env)
        reports = ex.feed("```\n" + "{" * (70 * 1024) + "\n" + '{"op":"wait","ms":1}\n')
        assert [(r.status, r.reason) for r in reports] == [("skipped", "a line over 65536 bytes"), ("executed", "")]
        ex.close()
    finally:
        env.close()


@pytest.mark.spec("axstream:7.example-1", "axstream:4.open", "axstream:x.failed-act")
def test_the_specs_open_then_type_example_aborts_where_open_cannot_run(address: str) -> None:
    # axstream §7's burst on a bundled task, whose profile has no "Notes": the open
    # fails, so the typing planned for the new note never lands in the task's window.
    with episode(address, "type-word", 8) as (env, _):
        ex = Executor(env)
        reports = ex.feed(
            "```jsonl\n"
            '{"op":"act","do":"open","target":"Notes"}\n'
            '{"op":"act","do":"wait","ms":500}\n'
            '{"op":"act","do":"key","keys":["cmd","n"]}\n'
            '{"op":"act","do":"type","text":"reminder: submit the spec"}\n'
            '{"op":"done","status":"success"}\n'
            "```\n"
        )
        ex.close()
        assert [(r.action or r.op, r.status) for r in reports] == [
            ("open", "failed"), ("wait", "aborted"), ("key", "aborted"), ("type", "aborted"), ("done", "aborted"),
        ]
        assert reports[0].code == "FAILED_PRECONDITION" and 'no app named "Notes"' in reports[0].reason
        assert ex.verdict is None
        assert env.step({"verb": "noop"})[4]["step_index"] == 1  # nothing ran before


@pytest.mark.spec("axstream:3.2.assert", "axstream:4.role-title")
def test_an_assert_on_an_off_screen_point_aborts_and_roles_match_as_models_write_them(address: str) -> None:
    with episode(address, "drag-to-zone", 9) as (env, _):
        ex = Executor(env)
        reports = ex.feed(
            "```\n"
            '{"op":"assert","target":{"x":5000,"y":5}}\n'
            '{"op":"act","do":"wait","ms":10}\n'
            "```\n```\n"
            '{"op":"assert","target":{"ax":{"role":"AXGroup","title":"green zone"}}}\n'
            '{"op":"assert","target":{"ax":{"role":"Panel","title":"orange square"}}}\n'
            "```\n"
        )
        ex.close()
        assert [(r.burst, r.status) for r in reports] == [(1, "failed"), (1, "aborted"), (2, "executed"),
                                                           (2, "executed")]
        assert reports[0].code == "INVALID_ARGUMENT" and "outside" in reports[0].reason


@pytest.mark.spec("axstream:5.gate")
def test_a_held_risky_action_runs_when_confirmed(address: str) -> None:
    with episode(address, "click-button", 10) as (env, info):
        label = info["instruction"].split('"')[1]
        ex = Executor(env)
        held = ex.feed(
            "```\n"
            f'{{"op":"act","do":"click","target":{{"ax":{{"role":"button","title":"{label}"}}}},"risk":"risky"}}\n'
            '{"op":"done","status":"success"}\n'
            "```\n"
        )
        assert [r.status for r in held] == ["held", "aborted"] and "confirm line 2" in held[0].reason
        (ran,) = ex.confirm(2)
        assert (ran.line, ran.status, ran.reward, ran.terminated) == (2, "executed", 1.0, True)
        # Nothing is held there any more, and no line 99 ever was.
        again = ex.confirm(2, 99)
        assert [r.status for r in again] == ["skipped", "skipped"] and "no held action on line 99" in again[1].reason
        ex.close()


@pytest.mark.spec("axstream:4.coordinate")
def test_pixels_of_a_downscaled_observation_click_what_the_model_saw(address: str) -> None:
    from deskgym.agents.reference import RED, centroid, mask

    with episode(address, "click-target", 12) as (env, _):
        ex = Executor(env, observe={"max_long_edge": 160})
        (obs,) = ex.feed('```\n{"op":"observe"}\n```\n')
        assert obs.frame is not None and obs.frame.shape == (120, 160, 3)
        at = centroid(mask(obs.frame, RED))
        assert at is not None
        turn = ex.feed(
            "```\n"
            '{"op":"act","do":"move","target":{"x":170,"y":5}}\n'
            f'{{"op":"act","do":"click","target":{{"x":{at[0]},"y":{at[1]}}}}}\n'
            "```\n",
            turn=True,
        )
        assert turn[0].status == "skipped" and "outside the 160x120 frame" in turn[0].reason
        assert (turn[1].status, turn[1].reward, turn[1].terminated) == ("executed", 1.0, True)
        ex.close()


@pytest.mark.spec("axstream:5.unknown-class", "axstream:6.6", "axstream:3.3.turn", "axstream:3.4.done")
def test_lines_after_observe_or_done_are_skipped_and_unknown_risk_classes_are_held(address: str) -> None:
    with episode(address, "click-target", 13) as (env, _):
        ex = Executor(env)
        reports = ex.feed(
            "```\n"
            '{"op":"act","do":"wait","ms":5,"risk":"catastrophic"}\n'
            "```\n```\n"
            '{"op":"observe"}\n'
            '{"op":"act","do":"wait","ms":5}\n'
            "```\n"
        )
        assert [(r.op, r.status) for r in reports] == [("act", "held"), ("observe", "executed"), ("act", "skipped")]
        assert "turn ended at observe" in reports[2].reason
        done = ex.feed('```\n{"op":"done","status":"failure","reason":"gave up"}\n{"op":"act","do":"wait","ms":5}\n```\n'
                       '```\n{"op":"act","do":"wait","ms":5}\n```\n', turn=True)
        assert [(r.op, r.status) for r in done] == [("done", "executed"), ("act", "skipped"), ("act", "skipped")]
        assert all("the task ended at done on line" in r.reason for r in done[1:])
        # Even a new turn does not revive a finished task.
        assert [r.status for r in ex.feed('```\n{"op":"act","do":"wait","ms":5}\n```\n', turn=True)] == ["skipped"]
        assert ex.verdict == ("failure", "gave up")
        ex.close()


@pytest.mark.spec("axstream:4.id")
def test_an_element_id_from_the_observation_is_a_target(address: str) -> None:
    with episode(address, "click-button", 14) as (env, info):
        label = info["instruction"].split('"')[1]
        ex = Executor(env, tree=True)
        (obs,) = ex.feed('```\n{"op":"observe"}\n```\n')
        assert obs.tree is not None
        (button,) = obs.tree.find(role="push button", name=label)
        click, done = ex.feed(f'```\n{{"op":"act","do":"click","target":{{"ax":{{"id":"{button.ref}"}}}}}}\n'
                              '{"op":"done","status":"success"}\n```\n', turn=True)
        assert (click.status, click.reward, done.status) == ("executed", 1.0, "executed")
        ex.close()


@pytest.mark.spec("axstream:7.example-2", "axstream:2.fence-open")
def test_the_specs_second_example_runs_as_written(address: str) -> None:
    # axstream §7's burst that must observe: cmd+l, type a query with its newline,
    # wait, observe. On the bundled typing task every line runs and the burst ends in
    # an observation showing the typed text's effect.
    with episode(address, "type-word", 15) as (env, _):
        ex = Executor(env)
        reports = ex.feed(
            "```jsonl\n"
            '{"op":"act","do":"key","keys":["cmd","l"]}\n'
            '{"op":"act","do":"type","text":"weather tokyo\\n"}\n'
            '{"op":"act","do":"wait","ms":800}\n'
            '{"op":"observe"}\n'
            "```\n"
        )
        assert [(r.action or r.op, r.status) for r in reports] == [
            ("key", "executed"), ("type", "executed"), ("wait", "executed"), ("observe", "executed")]
        assert reports[3].frame is not None and reports[3].frame.shape == (240, 320, 3)
        ex.close()
