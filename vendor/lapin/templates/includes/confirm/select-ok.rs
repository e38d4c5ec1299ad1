/// Server confirmation that publisher confirm mode has been enabled on this channel.
