//! The queue boundary as the host uses it. The contract (`QueueSource`, its errors and the
//! capabilities a source declares) is the `qhost-source` crate's, re-exported here under the
//! names the host's modules use; the two sources the host ships live here: SQS (`sqs`) and the
//! embedded queue (`local`).

pub(crate) use qhost_source::*;

pub(crate) mod local;
pub(crate) mod sqs;
