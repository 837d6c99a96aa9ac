"""Model text -> deskgym actions (no server): a realistic reply per grammar, the
tolerance a model's text needs, coordinates through the frame's geometry, and errors a
model can read. Every action parsed here must convert to its proto."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from deskgym import DeskgymError, to_proto
from deskgym.dialect import COORDS, FORMATS, VERBS, DialectError, detect, parse_actions, tool_call, write_action
from deskgym.geometry import Display

parse = parse_actions


def error(text: str, *args: Any, **kwargs: Any) -> DialectError:
    with pytest.raises(DialectError) as e:
        parse_actions(text, *args, **kwargs)
    return e.value


# --- one realistic reply per grammar -------------------------------------------------

QWEN_TOOL_CALL = """I need to open the File menu first, then save with the shortcut.
<tool_call>
{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [34, 12]}}
</tool_call>
<tool_call>
{"name": "computer_use", "arguments": {"action": "key", "keys": ["ctrl", "s"]}}
</tool_call>"""

CLAUDE_INVOKE = """I'll select the heading by dragging across it, then copy it.

<function_calls>
<invoke name="computer">
<parameter name="action">left_click_drag</parameter>
<parameter name="start_coordinate">[120, 340]</parameter>
<parameter name="coordinate">[480, 340]</parameter>
</invoke>
<invoke name="computer">
<parameter name="action">key</parameter>
<parameter name="text">ctrl+c</parameter>
</invoke>
</function_calls>"""

SEED_FUNCTION = """<think>The search box is at the top centre; I click it and type the query.</think>
<seed:tool_call>
<function=click>
<parameter=point><point>500 60</point></parameter>
</function>
<function=type>
<parameter=content>deskgym</parameter>
</function>
</seed:tool_call>"""

QWEN_CODER_FUNCTION = """Scrolling the list down to find the entry.
<tool_call>
<function name="scroll">
<parameter name="coordinate">[500, 700]</parameter>
<parameter name="direction">down</parameter>
<parameter name="amount">3</parameter>
</function>
</tool_call>"""

ELEMENT_XML = """Clicking the name field, then typing the name and submitting.
<click x="412" y="300"/>
<type>Ada Lovelace</type>
<key>Return</key>"""

UI_TARS = """Thought: The Save button is in the toolbar at the top left. I'll click it.
Action: click(start_box='<|box_start|>(153,97)<|box_end|>')"""

UI_TARS_15 = """Thought: 我需要复制这段文字 — copy the selected text, then scroll down to the form.
Action: hotkey(key='ctrl c')

scroll(point='<point>500 800</point>', direction='down')"""

OSWORLD_CODE = """The cursor is in cell B2; I will type the value and confirm with Enter.
```python
import pyautogui
import time
pyautogui.click(960, 540)
pyautogui.typewrite('42')
pyautogui.press('enter')
time.sleep(0.5)
```"""


GRAMMARS = pytest.mark.parametrize(
    ("reply", "grammar", "actions"),
    [
        (QWEN_TOOL_CALL, "tool_call", [{"verb": "click", "x": 34, "y": 12}, {"verb": "key", "keys": "ctrl+s"}]),
        (CLAUDE_INVOKE, "invoke", [{"verb": "drag", "x": 120, "y": 340, "to_x": 480, "to_y": 340},
                                   {"verb": "key", "keys": "ctrl+c"}]),
        (SEED_FUNCTION, "function", [{"verb": "click", "nx": 0.5, "ny": 0.06}, {"verb": "type_text", "text": "deskgym"}]),
        (QWEN_CODER_FUNCTION, "function", [{"verb": "scroll", "nx": 0.5, "ny": 0.7, "dx": 0, "dy": 3}]),
        (ELEMENT_XML, "xml", [{"verb": "click", "x": 412, "y": 300}, {"verb": "type_text", "text": "Ada Lovelace"},
                              {"verb": "key", "keys": "return"}]),
        (UI_TARS, "uitars", [{"verb": "click", "nx": 0.153, "ny": 0.097}]),
        (UI_TARS_15, "uitars", [{"verb": "key", "keys": "ctrl+c"}, {"verb": "scroll", "nx": 0.5, "ny": 0.8, "dx": 0, "dy": 5}]),
        (OSWORLD_CODE, "pyautogui", [{"verb": "click", "button": "left", "count": 1, "x": 960, "y": 540},
                                     {"verb": "type_text", "text": "42"}, {"verb": "key", "keys": "enter"},
                                     {"verb": "wait", "ms": 500}]),
    ],
    ids=["qwen-tool_call", "claude-invoke", "seed-function", "qwen3-coder-function", "xml", "ui-tars", "ui-tars-1.5",
         "osworld-pyautogui"],
)


@GRAMMARS
@pytest.mark.spec("aci:3.1.grammars", "aci:3.1.ordered")
def test_a_models_reply_becomes_its_actions(reply: str, grammar: str, actions: list[dict[str, Any]]) -> None:
    assert detect(reply) == grammar
    assert parse(reply) == actions
    assert parse(reply, format=grammar) == actions


def test_every_grammar_has_a_test_and_a_default_space() -> None:
    from deskgym.dialect import DEFAULT_COORDS

    assert set(FORMATS) == {"auto", *DEFAULT_COORDS} and set(DEFAULT_COORDS.values()) <= set(COORDS)


def test_detection_leaves_reasoning_out_as_parsing_does() -> None:
    reply = "<think>Qwen would write <tool_call>{...}</tool_call>; UI-TARS wants this:</think>\nAction: wait()"
    assert detect(reply) == "uitars" and parse(reply) == [{"verb": "wait", "ms": 5000}]


def test_an_explicit_format_reads_only_its_grammar() -> None:
    e = error(UI_TARS, format="tool_call")
    assert e.message.startswith("no tool_call action found in `Thought: The Save button")
    assert "expected <tool_call>{" in e.message


VERDICTS = pytest.mark.parametrize(
    ("reply", "actions"),
    [
        ("Action: finished(content='The file is saved.')", [{"verb": "noop", "end": "success", "text": "The file is saved."}]),
        ("Action: call_user()", [{"verb": "noop", "end": "failure"}]),
        ("Action: wait()", [{"verb": "wait", "ms": 5000}]),
        ("```\nWAIT\n```", [{"verb": "wait", "ms": 2000}]),
        ("The task is complete.\n```\nDONE\n```", [{"verb": "noop", "end": "success"}]),
        ("FAIL", [{"verb": "noop", "end": "failure"}]),
        ("```python\npyautogui.hotkey('ctrl', 'a')\nDONE\n```", [{"verb": "key", "keys": "ctrl+a"}, {"verb": "noop", "end": "success"}]),
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "terminate", "status": "failure"}}</tool_call>',
         [{"verb": "noop", "end": "failure"}]),
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "answer", "text": "42"}}</tool_call>',
         [{"verb": "noop", "end": "success", "text": "42"}]),
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "wait", "time": 2.5}}</tool_call>',
         [{"verb": "wait", "ms": 2500}]),
    ],
)


@VERDICTS
@pytest.mark.spec("aci:3.1.plain-dsl")
def test_waits_and_verdicts(reply: str, actions: list[dict[str, Any]]) -> None:
    assert parse(reply) == actions


# --- verbs: synonyms and their arguments ---------------------------------------------


SYNONYMS = pytest.mark.parametrize(
    ("call", "actions"),
    [
        ("click(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2}]),
        ("left_click(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2}]),
        ("left_single(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2}]),
        ("double_click(x=1, y=2)", [{"verb": "double_click", "x": 1, "y": 2}]),
        ("left_double(x=1, y=2)", [{"verb": "double_click", "x": 1, "y": 2}]),
        ("triple_click(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2, "count": 3}]),
        ("right_click(x=1, y=2)", [{"verb": "right_click", "x": 1, "y": 2}]),
        ("right_single(x=1, y=2)", [{"verb": "right_click", "x": 1, "y": 2}]),
        ("middle_click(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2, "button": "middle"}]),
        ("click(x=1, y=2, button='right')", [{"verb": "click", "x": 1, "y": 2, "button": "right"}]),
        ("move(x=1, y=2)", [{"verb": "move", "x": 1, "y": 2}]),
        ("mouse_move(x=1, y=2)", [{"verb": "move", "x": 1, "y": 2}]),
        ("hover(x=1, y=2)", [{"verb": "move", "x": 1, "y": 2}]),
        ("drag(x=1, y=2, to_x=3, to_y=4)", [{"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}]),
        ("left_click_drag(start_coordinate=[1, 2], coordinate=[3, 4])", [{"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}]),
        ("left_click_drag(coordinate=[3, 4])",  # Qwen-VL: from where the pointer is
         [{"verb": "mouse_down"}, {"verb": "move", "x": 3, "y": 4}, {"verb": "mouse_up"}]),
        ("drag(coordinate=[1, 2], end_coordinate=[3, 4])", [{"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}]),
        ("drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
         [{"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}]),
        ("left_mouse_down()", [{"verb": "mouse_down"}]),
        ("mouse_up(x=5, y=6)", [{"verb": "mouse_up", "x": 5, "y": 6}]),
        ("scroll(x=1, y=2, direction='up', amount=2)", [{"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": -2}]),
        ("scroll(coordinate=[1, 2], scroll_direction='left', scroll_amount=4)",
         [{"verb": "scroll", "x": 1, "y": 2, "dx": -4, "dy": 0}]),
        ("scroll(x=1, y=2, dy=3)", [{"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": 3}]),
        ("scroll(coordinate=[1, 2], pixels=-3)", [{"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": 3}]),
        ("hscroll(coordinate=[1, 2], pixels=2)", [{"verb": "scroll", "x": 1, "y": 2, "dx": 2, "dy": 0}]),
        ("type(text='hi')", [{"verb": "type_text", "text": "hi"}]),
        ("type_text(text='hi')", [{"verb": "type_text", "text": "hi"}]),
        ("write(content='hi')", [{"verb": "type_text", "text": "hi"}]),
        ("type(content='007')", [{"verb": "type_text", "text": "007"}]),
        ("key(keys='ctrl+s')", [{"verb": "key", "keys": "ctrl+s"}]),
        ("key(text='ctrl+a BackSpace')", [{"verb": "key", "keys": "ctrl+a"}, {"verb": "key", "keys": "backspace"}]),
        ("key(text='Page_Down')", [{"verb": "key", "keys": "Page_Down"}]),
        ("press(key='ENTER')", [{"verb": "key", "keys": "enter"}]),
        ("hotkey(key='ctrl shift t')", [{"verb": "key", "keys": "ctrl+shift+t"}]),
        ("keypress(keys=['CTRL', 'ArrowLeft'])", [{"verb": "key", "keys": "ctrl+Left"}]),
        ("key(keys='ctrl++')", [{"verb": "key", "keys": "ctrl+plus"}]),
        ("keydown(key='shift')", [{"verb": "key_down", "keys": "shift"}]),
        ("key_up(key='shift')", [{"verb": "key_up", "keys": "shift"}]),
        ("hold_key(text='shift', duration=1)",
         [{"verb": "key_down", "keys": "shift"}, {"verb": "wait", "ms": 1000}, {"verb": "key_up", "keys": "shift"}]),
        ("wait(ms=250)", [{"verb": "wait", "ms": 250}]),
        ("sleep(seconds=3)", [{"verb": "wait", "ms": 3000}]),
        ("screenshot()", [{"verb": "noop"}]),
        ("open_app(app_name='terminal')", [{"verb": "launch_app", "app": "terminal"}]),
        ("done()", [{"verb": "noop", "end": "success"}]),
        ("fail(reason='no such file')", [{"verb": "noop", "end": "failure", "text": "no such file"}]),
        ("call_user(status='success')", [{"verb": "noop", "end": "failure"}]),
        ("Left-Click(x=1, y=2)", [{"verb": "click", "x": 1, "y": 2}]),
        ("click(ref='e12')", [{"verb": "click", "ref": "e12"}]),
    ],
)


@SYNONYMS
def test_verb_synonyms_map_to_deskgym_actions(call: str, actions: list[dict[str, Any]]) -> None:
    assert parse(f"Action: {call}", coords="pixels") == actions


def test_the_verb_table_names_each_synonym_once() -> None:
    names = [n for ns in VERBS.values() for n in ns]
    assert len(names) == len(set(names))
    for must in ("left_click", "click", "double_click", "right_click", "type", "type_text", "write", "key", "press",
                 "hotkey", "scroll", "drag", "left_click_drag", "move", "mouse_move", "wait", "done", "finished", "fail"):
        assert must in names


def test_anthropics_held_modifier_and_a_pointer_verbs_modifiers() -> None:
    reply = """<invoke name="computer"><parameter name="action">left_click</parameter>
<parameter name="coordinate">[10, 20]</parameter><parameter name="text">shift</parameter></invoke>"""
    assert parse(reply) == [{"verb": "key_down", "keys": "shift"}, {"verb": "click", "x": 10, "y": 20},
                            {"verb": "key_up", "keys": "shift"}]
    e = error("<click x=1 y=2 modifiers='ctrl+q'/>")
    assert "click: modifiers='ctrl+q' are not modifier keys" in e.message


# --- tolerance -------------------------------------------------------------------------


TOLERANCE = pytest.mark.parametrize(
    ("reply", "actions"),
    [
        # Code fences, around the reply and inside a block.
        ("```xml\n<click x=\"5\" y=\"6\"/>\n```", [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>\n```json\n{"name": "click", "arguments": {"coordinate": [5, 6]}}\n```\n</tool_call>',
         [{"verb": "click", "x": 5, "y": 6}]),
        # Unclosed tags at the end of a reply.
        ('Done thinking.\n<tool_call>\n{"name": "click", "arguments": {"x": 5, "y": 6}}', [{"verb": "click", "x": 5, "y": 6}]),
        ('<invoke name="computer"><parameter name="action">type</parameter><parameter name="text">hello world',
         [{"verb": "type_text", "text": "hello world"}]),
        ("<function=type>\n<parameter=text>\nhello\n", [{"verb": "type_text", "text": "hello"}]),
        ("<type>first</type><key>Tab", [{"verb": "type_text", "text": "first"}, {"verb": "key", "keys": "tab"}]),
        ("<click x=1 y=2>\n<type>x</type>", [{"verb": "click", "x": 1, "y": 2}, {"verb": "type_text", "text": "x"}]),
        ("Action: click(start_box='(10,20)'", [{"verb": "click", "x": 10, "y": 20}]),
        # Unquoted attributes and single quotes.
        ("<click x=5 y=6/>", [{"verb": "click", "x": 5, "y": 6}]),
        ("<click x='5' y='6'/>", [{"verb": "click", "x": 5, "y": 6}]),
        ("<invoke name='type'><parameter name='text'>it's</parameter></invoke>", [{"verb": "type_text", "text": "it's"}]),
        ("<tool_call>{'name': 'click', 'arguments': {'x': 5, 'y': 6}}</tool_call>", [{"verb": "click", "x": 5, "y": 6}]),
        ("Action: type(content='it's done\\n')", [{"verb": "type_text", "text": "it's done\n"}]),
        # JSON: truncated where the meaning is unambiguous, trailing commas, bare keys.
        ('<tool_call>{"name": "click", "arguments": {"coordinate": [5, 6]}</tool_call>', [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>{"name": "click", "arguments": {"coordinate": [5, 6]', [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>{"name": "type", "arguments": {"text": "hello world</tool_call>', [{"verb": "type_text", "text": "hello world"}]),
        ('<tool_call>{"name": "click", "arguments": {"x": 5, "y": 6,},}</tool_call>', [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>{name: "click", arguments: {x: 5, y: 6}}</tool_call>', [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>{"name": "click", "arguments": "{\\"x\\": 5, \\"y\\": 6}"}</tool_call>', [{"verb": "click", "x": 5, "y": 6}]),
        ('<tool_call>[{"name": "click", "arguments": {"x": 5, "y": 6}}, {"name": "wait", "arguments": {}}]</tool_call>',
         [{"verb": "click", "x": 5, "y": 6}, {"verb": "wait", "ms": 1000}]),
        # Namespace prefixes, other spellings of the same tags.
        ('<ns:function_calls><ns:invoke name="click"><ns:parameter name="coordinate">[5, 6]</ns:parameter></ns:invoke>'
         "</ns:function_calls>", [{"verb": "click", "x": 5, "y": 6}]),
        ('<action name="click"><param name="x">5</param><param name="y">6</param></action>', [{"verb": "click", "x": 5, "y": 6}]),
        ("<scroll x=1 y=2>down</scroll><click>(3, 4)</click>",
         [{"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": 5}, {"verb": "click", "x": 3, "y": 4}]),
        ("<drag><start>(1,2)</start><end>(3,4)</end></drag>", [{"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4}]),
        ('<click x="5" y="6">the OK button</click>', [{"verb": "click", "x": 5, "y": 6}]),
        ("<think>I might write <b>bold</b> here.</think>\n<type>a &amp; b</type>", [{"verb": "type_text", "text": "a & b"}]),
        # Boxes: UI-TARS' four numbers are the box's centre.
        ("Action: click(start_box='(10,20,30,40)')", [{"verb": "click", "x": 20, "y": 30}]),
        ("Action: click(start_box='[10, 20]')", [{"verb": "click", "x": 10, "y": 20}]),
        # A one-action answer block, R1-style.
        ("<think>the icon</think>\n<answer>click(start_box='(10,20)')</answer>", [{"verb": "click", "x": 10, "y": 20}]),
        # Reasoning is not read for actions, even where it quotes one.
        ("<think>Maybe <click x=1 y=2/>? No: the field first.</think>\n<type>abc</type>", [{"verb": "type_text", "text": "abc"}]),
        ("The template opened it.\n```python\npyautogui.click(1, 2)\n```\n</think>\nAction: click(start_box='(7,8)')",
         [{"verb": "click", "x": 7, "y": 8}]),
        # An unclosed element ends at the next action, even one with the same tag.
        ("<click x=1 y=2>\n<click x=3 y=4></click>", [{"verb": "click", "x": 1, "y": 2}, {"verb": "click", "x": 3, "y": 4}]),
        # Several Thought/Action pairs, several calls on one Action line.
        ("Thought: the field.\nAction: click(start_box='(1,2)')\nThought: now the name.\nAction: type(content='x')",
         [{"verb": "click", "x": 1, "y": 2}, {"verb": "type_text", "text": "x"}]),
        # Prose that opens a quote is not a call.
        ("Note (it's the second field):\n<type>a</type>", [{"verb": "type_text", "text": "a"}]),
        ("Action: click(start_box='(1,2)'); type(content='x')", [{"verb": "click", "x": 1, "y": 2}, {"verb": "type_text", "text": "x"}]),
    ],
)


@TOLERANCE
@pytest.mark.spec("aci:3.1.tolerant")
def test_tolerant_of_what_models_write(reply: str, actions: list[dict[str, Any]]) -> None:
    assert parse(reply, coords="pixels") == actions


# --- coordinates -----------------------------------------------------------------------

#: A 1920x1080 screen shown to the model at half size.
HALF = Display(1920, 1080, 0, 0, 1920, 1080, 960, 540)
#: A window at (100, 50), 800x600, shown at 400x300.
WINDOW = Display(1920, 1080, 100, 50, 800, 600, 400, 300)


def test_pixels_of_the_screenshot_map_through_its_geometry() -> None:
    reply = '<tool_call>{"name": "click", "arguments": {"coordinate": [100, 200]}}</tool_call>'
    assert parse(reply) == [{"verb": "click", "x": 100, "y": 200}]  # no display: the screen's pixels
    assert parse(reply, display=HALF) == [{"verb": "click", "x": 200, "y": 400}]
    assert parse(reply, display=WINDOW) == [{"verb": "click", "x": 300, "y": 450}]
    drag = "<drag x=0 y=0 to_x=399 to_y=299/>"
    assert parse(drag, display=WINDOW) == [{"verb": "drag", "x": 100, "y": 50, "to_x": 898, "to_y": 648}]


def test_normalised_and_grid_coordinates() -> None:
    ui_tars = "Action: click(start_box='(500,500)')"
    assert parse(ui_tars) == [{"verb": "click", "nx": 0.5, "ny": 0.5}]  # travels as point_norm
    assert parse(ui_tars, display=HALF) == [{"verb": "click", "x": 960, "y": 540}]
    assert parse(ui_tars, display=WINDOW) == [{"verb": "click", "x": 500, "y": 350}]
    assert parse("<click x=0.25 y=1/>", coords="norm", display=HALF) == [{"verb": "click", "x": 480, "y": 1079}]
    qwen3 = '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [1000, 0]}}</tool_call>'
    assert parse(qwen3, coords="grid1000", display=HALF) == [{"verb": "click", "x": 1919, "y": 0}]
    drag = parse("Action: drag(start_box='(0,0)', end_box='(1000,500)')")
    assert drag == [{"verb": "drag", "nx": 0.0, "ny": 0.0, "nto_x": 1.0, "nto_y": 0.5}]
    assert to_proto(drag[0]).drag.to.point_norm.x == 1.0


@pytest.mark.spec("aci:3.1.plain-dsl")
def test_pyautogui_code_points_in_pixels_or_the_grid() -> None:
    code = "```python\npyautogui.moveTo(480, 270)\n```"
    assert parse(code, display=HALF) == [{"verb": "move", "x": 960, "y": 540}]
    assert parse(code, coords="grid1000") == [{"verb": "move", "nx": 0.48, "ny": 0.27}]
    assert "not in 0..1" in error(code, coords="norm").message


# --- errors a model can read -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ('Let me swipe.\n<tool_call>{"name": "swipe", "arguments": {"direction": "up"}}</tool_call>',
         "unknown verb 'swipe' in `<tool_call>{\"name\": \"swipe\""),
        ('<invoke name="computer"><parameter name="action">zoom</parameter></invoke>', "unknown verb 'zoom' in `<invoke"),
        ("<function=teleport><parameter=x>1</parameter></function>", "unknown verb 'teleport' in `<function=teleport>"),
        ("<quadclick x=1 y=2/>", "unknown verb 'quadclick' in `<quadclick x=1 y=2/>`"),
        ('<action name="swipe" x="1" y="2"/>', "unknown verb 'swipe'"),
        ("Thought: go home.\nAction: press_home()", "unknown verb 'press_home' in `press_home()`"),
    ],
)
@pytest.mark.spec("aci:3.1.never-drops")
def test_an_unknown_verb_is_refused_with_the_verbs_it_could_be(reply: str, says: str) -> None:
    e = error(reply)
    assert says in e.message, e.message
    assert "; expected a verb among click, double_click, triple_click, right_click" in e.message
    assert e.code == "INVALID_ARGUMENT" and isinstance(e, DeskgymError)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("<click/>", "click: missing the position in `<click/>`; expected coordinate [x, y] (or x and y)"),
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "type"}}</tool_call>',
         "type: missing the text to type in `<tool_call>{\"name\": \"computer_use\", \"arguments\": {\"action\": \"type\"}}`; "
         "expected text='...'"),
        ("Action: hotkey()", "key: missing the keys in `hotkey()`; expected keys such as 'ctrl+s', 'Return' or ['ctrl', 's']"),
        ("Action: scroll(start_box='(1,2)')",
         "scroll: missing the direction in `scroll(start_box='(1,2)')`; expected direction='down' (up, down, left, right) "
         "or dx/dy wheel clicks"),
        ("Action: scroll(direction='down')", "scroll: missing the position in `scroll(direction='down')`"),
        ("Action: drag(start_box='(1,2)')", "drag: missing the end in `drag(start_box='(1,2)')`"),
        ('<tool_call>{"name": "computer_use", "arguments": {"left_click": [1, 2]}}</tool_call>',
         "a 'computer_use' call without its action"),
        ("Action: click(start_box='the OK button')", "click: start_box='the OK button' is not a point"),
        ("Action: scroll(start_box='(1,2)', direction='sideways')", "scroll: direction 'sideways' is unknown"),
        ("Action: scroll(start_box='(1,2)', direction='down', amount=500)", "scroll: amount 500 is not a whole number in 0..50"),
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "wait", "time": 1000}}</tool_call>',
         "wait: time 1000 is not seconds in 0..100"),
        ('<tool_call>{"name": "terminate", "arguments": {"status": "maybe"}}</tool_call>', "done: status 'maybe' is unknown"),
        ('<action x="1" y="2"/>', "an <action> without a name in `<action x=\"1\" y=\"2\"/>`"),
        ("<type>a</type><scroll x=1 y=2/>", "scroll: missing the direction in `<scroll x=1 y=2/>`"),
        ("<click x=5 y=6>\n<tool>", None),  # (parses: a stray tag after an unclosed element is prose)
    ],
)
def test_a_missing_or_bad_argument_says_what_was_expected(reply: str, message: str | None) -> None:
    if message is None:
        assert parse(reply) == [{"verb": "click", "x": 5, "y": 6}]
        return
    e = error(reply)
    assert message in e.message, e.message


def test_text_that_matches_no_grammar_names_them_all() -> None:
    e = error("I clicked the button and the dialog closed, so the task should be done now.")
    assert e.message.startswith("no action found in `I clicked the button and the dialog closed")
    for shape in ("<tool_call>{", "<invoke name=", "<function=click>", "<click x=", "Action: click(start_box=",
                  "```python block of pyautogui"):
        assert shape in e.message
    assert "swipe left" in error("Action: swipe left").message  # framed, but no call


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        # Truncated where the meaning is not sure: inside a number, a string, after a key.
        ('<tool_call>{"name": "click", "arguments": {"coordinate": [100, 2', "the call is cut off where its meaning is unclear"),
        ('<tool_call>{"name": "type", "arguments": {"text": "hello wor', "the call is cut off where its meaning is unclear"),
        ('<tool_call>{"name": "click", "arguments": {"x":</tool_call>', "the call is cut off where its meaning is unclear"),
        ('<tool_call>{"name": "type", "arguments": {"text": "a}, b</tool_call>', "the call is cut off where its meaning is unclear"),
        ("<tool_call>click at 5, 6</tool_call>", "the call is not JSON"),
        ("<tool_call></tool_call>", "an empty tool call"),
        ('<tool_call>{"arguments": {"x": 1}}</tool_call>', "a tool call without a name"),
        ("Action: type(content='unfinished", "the call is cut off inside a string"),
        ("```python\nfor i in range(3):\n    pyautogui.press('tab')\n```",
         "code that is not only pyautogui calls with literal arguments in `for i in range(3): pyautogui.press('tab')`"),
        ("```python\npyautogui.dragTo(100, 200)\n```", "code that is not only pyautogui calls"),
        ("You could try pyautogui.click(5, 6) here.", "pyautogui code outside a code block that is not a bare call"),
    ],
)
@pytest.mark.spec("aci:3.1.never-drops", "aci:3.1.tolerant")
def test_text_that_cannot_be_read_for_sure_is_refused(reply: str, message: str) -> None:
    e = error(reply)
    assert e.message.startswith(message), e.message


def test_points_outside_the_frame_or_the_grid() -> None:
    e = error("<click x=960 y=10/>", display=HALF)
    assert e.message == ("click.position (960, 10) is outside the 960x540 frame in `<click x=960 y=10/>`; "
                         "expected a point inside the 960x540 screenshot")
    e = error("Action: click(start_box='(1200,40)')")
    assert "click.position (1200, 40) is outside 0..1000" in e.message and "coords='grid1000'" in e.message
    assert "is negative" in error("<click x=-5 y=10/>").message


def test_the_snippet_is_cut_and_on_one_line() -> None:
    long = "<tool_call>{" + '"name": "swipe", "arguments": {"path": "' + "x" * 500 + '"}}</tool_call>'
    e = error(long)
    assert len(e.snippet) == 120 and e.snippet.endswith("…")
    assert "\n" not in error("<click\n/>").snippet


def test_bad_arguments_of_the_caller_are_not_dialect_errors() -> None:
    with pytest.raises(DeskgymError) as e:
        parse_actions("<click x=1 y=2/>", format="yaml")
    assert not isinstance(e.value, DialectError) and e.value.field == "format"
    with pytest.raises(DeskgymError) as e:
        parse_actions("<click x=1 y=2/>", coords="inches")
    assert not isinstance(e.value, DialectError) and e.value.field == "coords"


def test_a_dialect_error_travels() -> None:
    e = error('<tool_call>{"name": "swipe", "arguments": {}}</tool_call>')
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is DialectError
    assert (back.code, back.message, back.field, back.problem, back.snippet, back.expected, str(back)) == (
        e.code, e.message, e.field, e.problem, e.snippet, e.expected, str(e))
    again = DialectError(e)  # Gymnasium's AsyncVectorEnv re-raises a worker's error as type(e)(e)
    assert (again.message, again.snippet, again.expected) == (e.message, e.snippet, e.expected)


# --- nothing parsed is unusable ------------------------------------------------------------


def _cases(mark: Any) -> list[tuple[Any, ...]]:
    return [tuple(c) for c in mark.args[1]]


def test_every_parsed_action_converts_to_its_proto() -> None:
    """Every reply of the tables above, parsed again, through the client's own
    conversion to the wire: nothing the dialect returns is unusable."""
    replies = [c[0] for c in _cases(GRAMMARS) + _cases(VERDICTS) + _cases(TOLERANCE)]
    replies += [f"Action: {c[0]}" for c in _cases(SYNONYMS)]
    replies += [SEED_FUNCTION, UI_TARS, "<drag x=0 y=0 to_x=399 to_y=299/>"]
    big = Display(3840, 2160, 0, 0, 3840, 2160, 1920, 1080)
    parsed = [a for r in replies for a in parse(r)]  # grid points travel normalised: point_norm on the wire
    parsed += [a for r in replies for a in parse(r, coords="pixels", display=big)]
    parsed += [a for r in replies for a in parse(r, coords="grid1000")]
    assert len(parsed) > 150
    for a in parsed:
        proto = to_proto(a)
        assert proto.WhichOneof("verb") == a["verb"], a


# --- the other way: actions written as a model writes them ---------------------------------

#: Recorded actions as a .skn bundle stores them (action_json): a double click is a click
#: of count 2, a right click a click with the right button.
WRITTEN = [
    ({"verb": "click", "x": 3, "y": 4, "button": "left", "count": 1}, {"verb": "click", "x": 3, "y": 4}),
    ({"verb": "click", "x": 3, "y": 4, "button": "left", "count": 2}, {"verb": "double_click", "x": 3, "y": 4}),
    ({"verb": "click", "x": 3, "y": 4, "button": "right", "count": 1}, {"verb": "right_click", "x": 3, "y": 4}),
    ({"verb": "move", "x": 7, "y": 8}, {"verb": "move", "x": 7, "y": 8}),
    ({"verb": "drag", "x": 1, "y": 2, "to_x": 5, "to_y": 6, "button": "left", "duration_ms": 0},
     {"verb": "drag", "x": 1, "y": 2, "to_x": 5, "to_y": 6}),
    ({"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": 3}, {"verb": "scroll", "x": 1, "y": 2, "dx": 0, "dy": 3}),
    ({"verb": "scroll", "x": 1, "y": 2, "dx": -2, "dy": 0}, {"verb": "scroll", "x": 1, "y": 2, "dx": -2, "dy": 0}),
    ({"verb": "type_text", "text": 'a<b & "c"\n'}, {"verb": "type_text", "text": 'a<b & "c"\n'}),
    ({"verb": "key", "keys": "ctrl+s"}, {"verb": "key", "keys": "ctrl+s"}),
    ({"verb": "wait", "ms": 300}, {"verb": "wait", "ms": 300}),
]


@pytest.mark.parametrize("fmt", ["tool_call", "xml"])
@pytest.mark.parametrize(("recorded", "meant"), WRITTEN)
def test_a_written_action_reads_back_as_itself(fmt: str, recorded: dict[str, Any], meant: dict[str, Any]) -> None:
    """What the chat export writes for the assistant parses back, through the grammar a
    model's reply goes through, to the action that was recorded."""
    text = write_action(recorded, fmt)
    assert detect(text) == fmt, text
    assert parse_actions(text) == [meant], text
    name, args = tool_call(recorded)
    assert name == meant["verb"] and all(meant[k] == v for k, v in args.items())


@pytest.mark.parametrize("action", [
    {"verb": "click", "x": 1, "y": 1, "button": "middle", "count": 1},
    {"verb": "click", "x": 1, "y": 1, "button": "left", "count": 3},
    {"verb": "launch_app", "app": "terminal"},
    {"verb": "invoke_action", "ref": "e3"},
    {"verb": "click", "ref": "e3"},
])
def test_an_action_no_call_names_is_refused_not_rewritten(action: dict[str, Any]) -> None:
    with pytest.raises(DialectError) as e:
        write_action(action)
    assert e.value.code == "INVALID_ARGUMENT" and e.value.snippet
