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
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "granted at CreatePool and applied when the sandbox starts; no handler asks for it"
        )
    )]
    Network,
}

impl Capability {
    /// Every capability, in the order the wire lists them.
    #[cfg(test)]
    pub(crate) const ALL: [Self; 6] = [
        Self::Exec,
        Self::Files,
        Self::LaunchApp,
        Self::Windows,
        Self::Clipboard,
        Self::Network,
    ];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_are_the_pool_specs_list() {
        // CreatePool checks names against spec::CAPABILITIES; grants name variants.
        let spelled: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(spelled, crate::spec::CAPABILITIES);
    }
}
