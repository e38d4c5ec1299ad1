//! A handler built against `qhost:handler@0.1.0`, the contract before `result-value` (0.1.1):
//! a host serving 0.1.1 still runs it. It sends its body to queue `next` through the outbox
//! and logs, so both of its imports are linked and used.

wit_bindgen::generate!({
    inline: "
        package qhost:handler@0.1.0;

        interface types {
            variant attribute-value { %string(string), number(string), binary(list<u8>) }
            record attribute { name: string, value: attribute-value }
            record message {
                id: string,
                idempotency-key: string,
                fencing-token: u64,
                queue: string,
                body: list<u8>,
                attributes: list<attribute>,
                receive-count: u32,
                sent-at-ms: u64,
                group-id: option<string>,
            }
            variant outcome { ack, retry(u32), reject(string) }
        }

        interface outbox {
            use types.{attribute};
            record outgoing {
                queue: string,
                body: list<u8>,
                attributes: list<attribute>,
                delay-seconds: u32,
                group-id: option<string>,
            }
            send: func(msg: outgoing) -> result<_, string>;
        }

        interface log {
            enum level { trace, debug, info, warn, error }
            write: func(level: level, message: string);
        }

        world handler {
            import log;
            import outbox;
            use types.{message, outcome};
            export handle: func(msg: message) -> outcome;
        }
    ",
});

use qhost::handler::{log, outbox};

struct Previous;

impl Guest for Previous {
    fn handle(msg: Message) -> Outcome {
        log::write(log::Level::Info, "built against qhost:handler@0.1.0");
        let next = outbox::Outgoing {
            queue: "next".into(),
            body: msg.body,
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
        };
        match outbox::send(&next) {
            Ok(()) => Outcome::Ack,
            Err(e) => Outcome::Reject(e),
        }
    }
}

export!(Previous);
