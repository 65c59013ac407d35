//! Handlers of the subcommands that do more than parse arguments; `main.rs` dispatches to them.

pub(crate) mod ask;
pub(crate) mod engines;
pub(crate) mod eval;
pub(crate) mod inspect;
pub(crate) mod plan;
pub(crate) mod prompt;
pub(crate) mod run;
pub(crate) mod status;
