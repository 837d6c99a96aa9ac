//! X keysym names, aliases and chord parsing.
//!
//! x11rb has no `XStringToKeysym`, so the names a user is likely to type live here.
//! Anything with a single character (`"s"`, `"/"`, `"é"`) maps through [`char_keysym`].

/// An X keysym value.
pub(crate) type Keysym = u32;

/// `Shift_L`, used to reach the second level of a key.
pub(crate) const SHIFT_L: Keysym = 0xffe1;
/// `Return`.
pub(crate) const RETURN: Keysym = 0xff0d;
/// `Tab`.
pub(crate) const TAB: Keysym = 0xff09;
/// `BackSpace`.
pub(crate) const BACKSPACE: Keysym = 0xff08;

/// Named keysyms (exact X names, case-sensitive).
const NAMED: &[(&str, Keysym)] = &[
    ("BackSpace", 0xff08),
    ("Tab", 0xff09),
    ("Linefeed", 0xff0a),
    ("Clear", 0xff0b),
    ("Return", 0xff0d),
    ("Pause", 0xff13),
    ("Scroll_Lock", 0xff14),
    ("Sys_Req", 0xff15),
    ("Escape", 0xff1b),
    ("Delete", 0xffff),
    ("Home", 0xff50),
    ("Left", 0xff51),
    ("Up", 0xff52),
    ("Right", 0xff53),
    ("Down", 0xff54),
    ("Prior", 0xff55),
    ("Page_Up", 0xff55),
    ("Next", 0xff56),
    ("Page_Down", 0xff56),
    ("End", 0xff57),
    ("Begin", 0xff58),
    ("Select", 0xff60),
    ("Print", 0xff61),
    ("Execute", 0xff62),
    ("Insert", 0xff63),
    ("Undo", 0xff65),
    ("Redo", 0xff66),
    ("Menu", 0xff67),
    ("Find", 0xff68),
    ("Cancel", 0xff69),
    ("Help", 0xff6a),
    ("Break", 0xff6b),
    ("Num_Lock", 0xff7f),
    ("KP_Enter", 0xff8d),
    ("KP_Add", 0xffab),
    ("KP_Subtract", 0xffad),
    ("KP_Multiply", 0xffaa),
    ("KP_Divide", 0xffaf),
    ("Shift_L", 0xffe1),
    ("Shift_R", 0xffe2),
    ("Control_L", 0xffe3),
    ("Control_R", 0xffe4),
    ("Caps_Lock", 0xffe5),
    ("Meta_L", 0xffe7),
    ("Meta_R", 0xffe8),
    ("Alt_L", 0xffe9),
    ("Alt_R", 0xffea),
    ("Super_L", 0xffeb),
    ("Super_R", 0xffec),
    ("space", 0x20),
    ("exclam", 0x21),
    ("quotedbl", 0x22),
    ("numbersign", 0x23),
    ("dollar", 0x24),
    ("percent", 0x25),
    ("ampersand", 0x26),
    ("apostrophe", 0x27),
    ("parenleft", 0x28),
    ("parenright", 0x29),
    ("asterisk", 0x2a),
    ("plus", 0x2b),
    ("comma", 0x2c),
    ("minus", 0x2d),
    ("period", 0x2e),
    ("slash", 0x2f),
    ("colon", 0x3a),
    ("semicolon", 0x3b),
    ("less", 0x3c),
    ("equal", 0x3d),
    ("greater", 0x3e),
    ("question", 0x3f),
    ("at", 0x40),
    ("bracketleft", 0x5b),
    ("backslash", 0x5c),
    ("bracketright", 0x5d),
    ("asciicircum", 0x5e),
    ("underscore", 0x5f),
    ("grave", 0x60),
    ("braceleft", 0x7b),
    ("bar", 0x7c),
    ("braceright", 0x7d),
    ("asciitilde", 0x7e),
];

/// Friendly aliases (matched case-insensitively) for the names people actually type.
const ALIASES: &[(&str, Keysym)] = &[
    ("ctrl", 0xffe3),
    ("control", 0xffe3),
    ("alt", 0xffe9),
    ("shift", 0xffe1),
    ("super", 0xffeb),
    ("win", 0xffeb),
    ("cmd", 0xffeb),
    ("meta", 0xffe7),
    ("enter", 0xff0d),
    ("return", 0xff0d),
    ("esc", 0xff1b),
    ("escape", 0xff1b),
    ("backspace", 0xff08),
    ("del", 0xffff),
    ("delete", 0xffff),
    ("pageup", 0xff55),
    ("pgup", 0xff55),
    ("pagedown", 0xff56),
    ("pgdn", 0xff56),
    ("left", 0xff51),
    ("right", 0xff53),
    ("up", 0xff52),
    ("down", 0xff54),
    ("home", 0xff50),
    ("end", 0xff57),
    ("tab", 0xff09),
    ("space", 0x20),
    ("insert", 0xff63),
    ("capslock", 0xffe5),
    ("printscreen", 0xff61),
    ("menu", 0xff67),
];

/// The keysym that types `c`: Latin-1 maps to itself, everything else to the Unicode
/// keysym range (`0x0100_0000 | codepoint`), which X servers accept on remapped keys.
pub fn char_keysym(c: char) -> Keysym {
    match c {
        '\n' | '\r' => RETURN,
        '\t' => TAB,
        '\u{8}' => BACKSPACE,
        ' '..='~' | '\u{a0}'..='\u{ff}' => c as u32,
        _ => 0x0100_0000 | c as u32,
    }
}

/// Function and device keysyms beyond the character ones (keysymdef.h's `XK_KP_*`,
/// `XK_ISO_*` and XF86keysym.h's media keys), by their X names.
const MORE_NAMED: &[(&str, Keysym)] = &[
    ("KP_Space", 0xff80),
    ("KP_Tab", 0xff89),
    ("KP_F1", 0xff91),
    ("KP_F2", 0xff92),
    ("KP_F3", 0xff93),
    ("KP_F4", 0xff94),
    ("KP_Home", 0xff95),
    ("KP_Left", 0xff96),
    ("KP_Up", 0xff97),
    ("KP_Right", 0xff98),
    ("KP_Down", 0xff99),
    ("KP_Prior", 0xff9a),
    ("KP_Page_Up", 0xff9a),
    ("KP_Next", 0xff9b),
    ("KP_Page_Down", 0xff9b),
    ("KP_End", 0xff9c),
    ("KP_Begin", 0xff9d),
    ("KP_Insert", 0xff9e),
    ("KP_Delete", 0xff9f),
    ("KP_Equal", 0xffbd),
    ("KP_Separator", 0xffac),
    ("KP_Decimal", 0xffae),
    ("KP_0", 0xffb0),
    ("KP_1", 0xffb1),
    ("KP_2", 0xffb2),
    ("KP_3", 0xffb3),
    ("KP_4", 0xffb4),
    ("KP_5", 0xffb5),
    ("KP_6", 0xffb6),
    ("KP_7", 0xffb7),
    ("KP_8", 0xffb8),
    ("KP_9", 0xffb9),
    ("Hyper_L", 0xffed),
    ("Hyper_R", 0xffee),
    ("Shift_Lock", 0xffe6),
    ("Mode_switch", 0xff7e),
    ("ISO_Left_Tab", 0xfe20),
    ("ISO_Level3_Shift", 0xfe03),
    ("XF86MonBrightnessUp", 0x1008_ff02),
    ("XF86MonBrightnessDown", 0x1008_ff03),
    ("XF86AudioLowerVolume", 0x1008_ff11),
    ("XF86AudioMute", 0x1008_ff12),
    ("XF86AudioRaiseVolume", 0x1008_ff13),
    ("XF86AudioPlay", 0x1008_ff14),
    ("XF86AudioStop", 0x1008_ff15),
    ("XF86AudioPrev", 0x1008_ff16),
    ("XF86AudioNext", 0x1008_ff17),
    ("XF86HomePage", 0x1008_ff18),
    ("XF86Mail", 0x1008_ff19),
    ("XF86Search", 0x1008_ff1b),
    ("XF86Calculator", 0x1008_ff1d),
    ("XF86Back", 0x1008_ff26),
    ("XF86Forward", 0x1008_ff27),
    ("XF86Refresh", 0x1008_ff29),
    ("XF86PowerOff", 0x1008_ff2a),
    ("XF86Sleep", 0x1008_ff2f),
    ("XF86AudioPause", 0x1008_ff31),
    ("XF86Copy", 0x1008_ff57),
    ("XF86Cut", 0x1008_ff58),
    ("XF86Paste", 0x1008_ff6d),
];

/// Looks up one key name: an exact X keysym name (every character keysym of
/// keysymdef.h, the function, keypad and media keys), an alias, `F1`..`F35`, a single
/// character, or a keysym number (`0x1008ff14`).
pub(crate) fn keysym_from_name(name: &str) -> Option<Keysym> {
    if let Some(&(_, k)) = NAMED.iter().chain(MORE_NAMED).find(|(n, _)| *n == name) {
        return Some(k);
    }
    if let Some(r) = x11_keysymdef::lookup_by_name(name) {
        return Some(r.keysym);
    }
    if let Some(hex) = name.strip_prefix("0x")
        && let Ok(k) = u32::from_str_radix(hex, 16)
        && k != 0
        && k <= 0x1fff_ffff
    {
        return Some(k);
    }
    let lower = name.to_ascii_lowercase();
    if let Some(&(_, k)) = ALIASES.iter().find(|(n, _)| *n == lower) {
        return Some(k);
    }
    if let Some(n) = name
        .strip_prefix(['F', 'f'])
        .and_then(|d| d.parse::<u32>().ok())
        && (1..=35).contains(&n)
    {
        return Some(0xffbe + n - 1);
    }
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if !c.is_control() => Some(char_keysym(c)),
        _ => None,
    }
}

/// Client input quoted in an error, cut to 40 characters (messages must stay short).
fn short(s: &str) -> String {
    let head: String = s.chars().take(40).collect();
    if head.len() == s.len() {
        format!("{head:?}")
    } else {
        format!("{head:?}...")
    }
}

/// Parses a chord such as `"ctrl+shift+t"` into keysyms, modifiers first as written.
///
/// A literal plus is written `"plus"` (or `"ctrl++"`, where the final `+` is the key).
/// The error names the first unknown key.
pub fn parse_chord(chord: &str) -> Result<Vec<Keysym>, String> {
    let chord = chord.trim();
    if chord.is_empty() {
        return Err("key chord is empty".into());
    }
    let mut parts: Vec<&str> = chord.split('+').collect();
    // "ctrl++" splits into ["ctrl", "", ""]: the trailing empty pair is a literal '+'.
    if chord.ends_with("++") || chord == "+" {
        parts.retain(|p| !p.is_empty());
        parts.push("plus");
    }
    parts
        .iter()
        .map(|p| {
            let p = p.trim();
            if p.is_empty() {
                return Err(format!("key chord {} has an empty key name", short(chord)));
            }
            keysym_from_name(p)
                .ok_or_else(|| format!("unknown key name {} in {}", short(p), short(chord)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_parse() {
        assert_eq!(parse_chord("ctrl+s"), Ok(vec![0xffe3, 's' as u32]));
        assert_eq!(parse_chord("Return"), Ok(vec![RETURN]));
        assert_eq!(parse_chord("shift+Tab"), Ok(vec![SHIFT_L, TAB]));
        assert_eq!(parse_chord("F12"), Ok(vec![0xffc9]));
        assert_eq!(parse_chord("ctrl++"), Ok(vec![0xffe3, 0x2b]));
        assert_eq!(parse_chord("ENTER"), Ok(vec![RETURN]));
    }

    #[test]
    fn every_keysym_name_resolves() {
        for (name, sym) in [
            ("Uhorngrave", 0x1eea),
            ("eacute", 0xe9),
            ("Greek_alpha", 0x7e1),
            ("XF86AudioPlay", 0x1008_ff14),
            ("KP_5", 0xffb5),
            ("ISO_Left_Tab", 0xfe20),
            ("0x1008ff14", 0x1008_ff14),
            ("Return", 0xff0d),
            ("F35", 0xffe0),
        ] {
            assert_eq!(keysym_from_name(name), Some(sym), "{name}");
        }
        assert_eq!(keysym_from_name("0x0"), None);
        assert_eq!(keysym_from_name("NoSuchKeysym"), None);
    }

    #[test]
    fn unknown_names_are_named_in_the_error() {
        let e = parse_chord("ctrl+nosuchkey").unwrap_err();
        assert!(e.contains("nosuchkey"), "{e}");
        assert!(parse_chord("").is_err());
        assert!(parse_chord("ctrl+").is_err());
        assert!(parse_chord("F99").is_err());
    }

    #[test]
    fn unicode_chars_use_the_unicode_range() {
        assert_eq!(char_keysym('a'), 0x61);
        assert_eq!(char_keysym('é'), 0xe9);
        assert_eq!(char_keysym('€'), 0x0100_20ac);
    }
}
