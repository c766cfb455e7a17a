//! Opt-in SIGINT/SIGTERM handling: every registered session writes its `incomplete` trailer.
//!
//! Then the program's own handling of the signal continues.

use std::io;
use std::sync::{Arc, Mutex, Weak};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use super::TraceSession;
use super::output::lock;
use crate::schema::Outcome;

/// What happens after a session wrote its trailer on SIGINT or SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSignal {
    /// The signal's default action follows: the process ends as it would have without the
    /// handler (killed by the signal). For programs that do not handle the signals
    /// themselves.
    Terminate,
    /// Nothing more: a handler the program installed before (chained by `signal-hook`) or
    /// registered through `signal-hook` decides what happens. Records after the trailer are
    /// dropped and a later `finish` returns [`TraceError::AlreadyFinished`](crate::TraceError).
    Continue,
}

struct SignalState {
    sessions: Vec<Weak<TraceSession>>,
    terminate: bool,
    installed: bool,
}

static STATE: Mutex<SignalState> = Mutex::new(SignalState {
    sessions: Vec::new(),
    terminate: false,
    installed: false,
});

/// Registers `session`; installs the handler thread on first use.
pub(super) fn register(session: &Arc<TraceSession>, after: AfterSignal) -> io::Result<()> {
    let mut st = lock(&STATE);
    st.sessions.retain(|w| w.strong_count() > 0);
    st.sessions.push(Arc::downgrade(session));
    if after == AfterSignal::Terminate {
        st.terminate = true;
    }
    if st.installed {
        return Ok(());
    }
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("trace-record-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let (sessions, terminate) = {
                    let st = lock(&STATE);
                    (st.sessions.clone(), st.terminate)
                };
                for s in sessions.iter().filter_map(Weak::upgrade) {
                    // Already finished is fine: the trailer is there.
                    let _ = s.close(Outcome::Incomplete);
                }
                if terminate {
                    // The default action of SIGINT and SIGTERM ends the process.
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                }
            }
        })?;
    st.installed = true;
    Ok(())
}
