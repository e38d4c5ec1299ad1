//! A handler built against `qhost:handler@0.2.0`, a version this host does not serve.

wit_bindgen::generate!({
    inline: "
        package qhost:handler@0.2.0;

        interface types {
            record message { id: string }
            variant outcome { ack, retry(u32), reject(string) }
        }

        interface log {
            write: func(message: string);
        }

        world handler {
            import log;
            use types.{message, outcome};
            export handle: func(msg: message) -> outcome;
        }
    ",
});

struct Next;

impl Guest for Next {
    fn handle(msg: Message) -> Outcome {
        qhost::handler::log::write(&msg.id);
        Outcome::Ack
    }
}

export!(Next);
