//! `wasi:keyvalue` for guests: the draft's `store`, `atomics` and `batch` interfaces, served
//! from the run's [`RunState`] (see `crate::kv`). Linked for every plugin; a bucket its
//! manifest does not grant is refused at `open` with `access-denied`.

use wasmtime::component::{HasSelf, Linker, Resource};

use super::state::HostState;
use crate::kv::run::KvError;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasi:keyvalue/imports",
        // Reads reach the store, so every call may wait; to the guest they still block.
        imports: { default: async },
        with: {
            "wasi:keyvalue/store.bucket": super::KvBucket,
        },
    });
}

use bindings::wasi::keyvalue::{atomics, batch, store};

/// An open bucket, as the guest holds it: its handle in the run's state. `pub` because the
/// generated bindings re-export it; nothing outside the crate can name it.
#[allow(unreachable_pub)]
#[derive(Debug)]
pub struct KvBucket(u32);

fn get(state: &mut HostState) -> &mut HostState {
    state
}

/// Adds the three interfaces to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    store::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    atomics::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    batch::add_to_linker::<_, HasSelf<_>>(linker, get).map_err(anyhow::Error::from)?;
    Ok(())
}

fn to_guest(error: KvError) -> store::Error {
    match error {
        KvError::AccessDenied(_) => store::Error::AccessDenied,
        KvError::Other(text) => store::Error::Other(text),
    }
}

impl HostState {
    fn handle(&mut self, bucket: &Resource<KvBucket>) -> Result<u32, store::Error> {
        self.table()
            .get(bucket)
            .map(|b| b.0)
            .map_err(|e| store::Error::Other(format!("no such bucket: {e}")))
    }
}

impl store::Host for HostState {
    async fn open(&mut self, identifier: String) -> Result<Resource<KvBucket>, store::Error> {
        let handle = self.kv().open(&identifier).map_err(to_guest)?;
        self.table()
            .push(KvBucket(handle))
            .map_err(|e| store::Error::Other(format!("cannot open another bucket: {e}")))
    }
}

impl store::HostBucket for HostState {
    async fn get(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        let handle = self.handle(&bucket)?;
        self.kv().get(handle, &key).await.map_err(to_guest)
    }

    async fn set(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), store::Error> {
        let handle = self.handle(&bucket)?;
        self.kv().set(handle, &key, value).map_err(to_guest)
    }

    async fn delete(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
    ) -> Result<(), store::Error> {
        let handle = self.handle(&bucket)?;
        self.kv().delete(handle, &key).map_err(to_guest)
    }

    async fn exists(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
    ) -> Result<bool, store::Error> {
        let handle = self.handle(&bucket)?;
        self.kv().exists(handle, &key).await.map_err(to_guest)
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<KvBucket>,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, store::Error> {
        let handle = self.handle(&bucket)?;
        let (keys, cursor) = self.kv().list(handle, cursor).await.map_err(to_guest)?;
        Ok(store::KeyResponse { keys, cursor })
    }

    async fn drop(&mut self, bucket: Resource<KvBucket>) -> wasmtime::Result<()> {
        self.table().delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for HostState {
    async fn increment(
        &mut self,
        bucket: Resource<KvBucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, store::Error> {
        let handle = self.handle(&bucket)?;
        self.kv()
            .increment(handle, &key, delta)
            .await
            .map_err(to_guest)
    }
}

impl batch::Host for HostState {
    async fn get_many(
        &mut self,
        bucket: Resource<KvBucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, store::Error> {
        let handle = self.handle(&bucket)?;
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            let value = self.kv().get(handle, &key).await.map_err(to_guest)?;
            found.push(value.map(|v| (key, v)));
        }
        Ok(found)
    }

    async fn set_many(
        &mut self,
        bucket: Resource<KvBucket>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), store::Error> {
        let handle = self.handle(&bucket)?;
        for (key, value) in key_values {
            self.kv().set(handle, &key, value).map_err(to_guest)?;
        }
        Ok(())
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<KvBucket>,
        keys: Vec<String>,
    ) -> Result<(), store::Error> {
        let handle = self.handle(&bucket)?;
        for key in keys {
            self.kv().delete(handle, &key).map_err(to_guest)?;
        }
        Ok(())
    }
}
