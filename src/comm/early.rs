//! Messages that arrive before their receive: flows between two ranks interleave on one link
//! (a gradient may be sent ahead of an activation the receiver wants first), each flow in
//! order. A receive takes its message from those kept, or reads the link until it comes,
//! keeping every message of another flow; one of the same flow with another tag is an error.

use std::collections::HashMap;

use super::Tag;
use crate::error::{Error, Result};

/// One rank's kept messages, by (sender, tag).
pub(crate) struct Early<T> {
    kept: HashMap<(usize, Tag), T>,
}

impl<T> Default for Early<T> {
    fn default() -> Self {
        Early {
            kept: HashMap::new(),
        }
    }
}

impl<T> Early<T> {
    /// Rank `rank`'s message `tag` from `from`; `next` reads the link's next message.
    pub fn take(
        &mut self,
        rank: usize,
        from: usize,
        tag: Tag,
        mut next: impl FnMut() -> Result<(Tag, T)>,
    ) -> Result<T> {
        if let Some(msg) = self.kept.remove(&(from, tag)) {
            return Ok(msg);
        }
        loop {
            let (got, msg) = next()?;
            if got == tag {
                return Ok(msg);
            }
            if got.flow == tag.flow {
                return Err(Error::Config(format!(
                    "rank {rank} expected {tag:?} from rank {from} but got {got:?}"
                )));
            }
            if self.kept.insert((from, got), msg).is_some() {
                return Err(Error::Config(format!(
                    "rank {rank} got {got:?} from rank {from} twice"
                )));
            }
        }
    }
}
