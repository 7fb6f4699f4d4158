package natsbus

import (
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is the JetStream context natsbus's constructors and functions
// take; [NewJetStream] makes one. Packages outside natsbus hold it and hand
// it back to natsbus: they never call its methods, because what they do
// with JetStream is a natsbus function named for it.
type JetStream = jetstream.JetStream

// Consumer is a JetStream consumer, as [WorkQueueConfig.Ensure] returns it.
type Consumer = jetstream.Consumer
