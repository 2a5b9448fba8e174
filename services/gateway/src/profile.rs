//! Which tools an MCP client sees (spec MCP-02).

use std::fmt;
use std::str::FromStr;

use crate::tools;

/// A named tool profile. `code`, `full` and `power` expose the same loop and
/// memory tools; `whole` exposes every tool, including the execution-learning
/// observer that is in no named profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolProfile {
    Code,
    #[default]
    Full,
    Power,
    Whole,
}

/// `SLM_MCP_PROFILE` (or `--profile`) named no known profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseToolProfileError(pub String);

impl fmt::Display for ParseToolProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown MCP tool profile '{}' (expected one of: code, full, power, whole)",
            self.0
        )
    }
}

impl std::error::Error for ParseToolProfileError {}

impl FromStr for ToolProfile {
    type Err = ParseToolProfileError;

    /// Case-insensitive, surrounding whitespace ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "code" => Ok(Self::Code),
            "full" => Ok(Self::Full),
            "power" => Ok(Self::Power),
            "whole" => Ok(Self::Whole),
            _ => Err(ParseToolProfileError(s.to_string())),
        }
    }
}

impl fmt::Display for ToolProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToolProfile {
    pub const ALL: [ToolProfile; 4] = [Self::Code, Self::Full, Self::Power, Self::Whole];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Code => "code",
            Self::Full => "full",
            Self::Power => "power",
            Self::Whole => "whole",
        }
    }

    /// The profile chosen by the environment: `SLM_MCP_ALL_TOOLS=1` means
    /// `whole`; otherwise `SLM_MCP_PROFILE` (unset or empty means `full`).
    /// An unknown name is an error rather than a silent fallback, so a typo
    /// does not hide tools.
    pub fn from_env() -> Result<Self, ParseToolProfileError> {
        Self::from_vars(
            std::env::var("SLM_MCP_ALL_TOOLS").ok().as_deref(),
            std::env::var("SLM_MCP_PROFILE").ok().as_deref(),
        )
    }

    /// [`Self::from_env`] on given values (testable without touching the
    /// process environment).
    pub fn from_vars(
        all_tools: Option<&str>,
        profile: Option<&str>,
    ) -> Result<Self, ParseToolProfileError> {
        if all_tools.map(str::trim) == Some("1") {
            return Ok(Self::Whole);
        }
        match profile.map(str::trim) {
            None | Some("") => Ok(Self::default()),
            Some(p) => p.parse(),
        }
    }

    /// The exact tool names this profile exposes, in listing order.
    pub fn tool_names(self) -> &'static [&'static str] {
        match self {
            Self::Code | Self::Full | Self::Power => tools::NAMED_PROFILE_TOOLS,
            Self::Whole => tools::ALL_TOOLS,
        }
    }

    pub fn exposes(self, tool: &str) -> bool {
        self.tool_names().contains(&tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_case_insensitively() {
        assert_eq!("code".parse(), Ok(ToolProfile::Code));
        assert_eq!(" Full ".parse(), Ok(ToolProfile::Full));
        assert_eq!("POWER".parse(), Ok(ToolProfile::Power));
        assert_eq!("whole".parse(), Ok(ToolProfile::Whole));
        assert!("core".parse::<ToolProfile>().is_err());
        assert!("".parse::<ToolProfile>().is_err());
        for p in ToolProfile::ALL {
            assert_eq!(p.to_string().parse(), Ok(p));
        }
    }

    #[test]
    fn environment_selection() {
        assert_eq!(ToolProfile::from_vars(None, None), Ok(ToolProfile::Full));
        assert_eq!(
            ToolProfile::from_vars(None, Some("")),
            Ok(ToolProfile::Full)
        );
        assert_eq!(
            ToolProfile::from_vars(None, Some("code")),
            Ok(ToolProfile::Code)
        );
        assert_eq!(
            ToolProfile::from_vars(Some("1"), Some("code")),
            Ok(ToolProfile::Whole)
        );
        assert_eq!(
            ToolProfile::from_vars(Some("0"), Some("power")),
            Ok(ToolProfile::Power)
        );
        assert!(ToolProfile::from_vars(None, Some("mesh")).is_err());
    }

    /// MCP-02, and the invariant that no profile has a tool that registers
    /// or runs a check or writes a receipt.
    #[test]
    fn tool_list_of_each_profile_is_exact() {
        let named = [
            "slm_loop_run",
            "slm_loop_history",
            "slm_loop_show",
            "observe_bounded_loop_evidence",
            "remember",
            "recall",
        ];
        for p in [ToolProfile::Code, ToolProfile::Full, ToolProfile::Power] {
            assert_eq!(p.tool_names(), named, "{p}");
            assert!(!p.exposes("observe_bounded_loop_execution_learning"));
        }
        let mut whole = named.to_vec();
        whole.push("observe_bounded_loop_execution_learning");
        assert_eq!(ToolProfile::Whole.tool_names(), whole.as_slice());
        for p in ToolProfile::ALL {
            for name in p.tool_names() {
                for banned in ["register", "check", "receipt", "execute", "kill"] {
                    assert!(!name.contains(banned), "{p} exposes {name}");
                }
            }
        }
    }
}
