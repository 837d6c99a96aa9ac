//! The boundary capabilities a pool may be granted, as one enum: handlers ask for a
//! variant, so a misspelt grant check fails to compile instead of always refusing.
//! The wire spells each as `CreatePoolRequest.capabilities` does ([`Capability::as_str`]).

/// One boundary capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capability {
    /// Run commands in the sandbox (Exec, ExecStream, Tunnel, programs by path).
    Exec,
    /// Put, get and list files in the sandbox.
    Files,
    /// Start an app of the profile's catalog.
    LaunchApp,
    /// List, activate, close, move and resize windows.
    Windows,
    /// Read and set the clipboard.
    Clipboard,
    /// Outbound network access from the env's own network stack.
    Network,
}

impl Capability {
    /// Every capability, in the order the wire lists them (an unknown-capability error
    /// names them so).
    pub(crate) const ALL: [Self; 6] = [
        Self::Exec,
        Self::Files,
        Self::LaunchApp,
        Self::Windows,
        Self::Clipboard,
        Self::Network,
    ];

    /// The capability the wire spells `name`, if any.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The wire spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Files => "files",
            Self::LaunchApp => "launch_app",
            Self::Windows => "windows",
            Self::Clipboard => "clipboard",
            Self::Network => "network",
        }
    }
}

/// The wire spelling (the server's allow list and `PoolInfo.capabilities` are strings).
impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_parse_back_and_nothing_else_does() {
        for c in Capability::ALL {
            assert_eq!(Capability::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(Capability::parse("Exec"), None);
        assert_eq!(Capability::parse(""), None);
    }
}
