//! Protection domains.

use super::*;

impl RdmaCoreDevice {
    pub(crate) fn alloc_pd(&self) -> Result<PdId> {
        let pd = self
            .ctx
            .alloc_pd()
            .map_err(|e| self.call_err("ibv_alloc_pd", io::Error::other(e.to_string())))?;
        let mut t = write_tables(&self.tables);
        let id = t.id();
        t.pds.insert(id, pd);
        Ok(PdId(id))
    }

    pub(crate) fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        let mut t = write_tables(&self.tables);
        let p = t.pds.get(&pd.0).ok_or(Error::no_such(format_args!("protection domain {pd:?}")))?;
        // Its regions, QPs and SRQs hold it too: sideway deallocates it with the last.
        if Arc::strong_count(p) > 1 {
            return Err(Error::refused(
                ErrorKind::Busy,
                format!("protection domain {pd:?} still has memory regions, QPs or SRQs"),
            ));
        }
        drop(t.pds.remove(&pd.0));
        Ok(())
    }
}
