/// Server confirmation of a `basic.consume` request, returning the consumer tag.
