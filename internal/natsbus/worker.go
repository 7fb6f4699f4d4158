package natsbus

import (
	"errors"
)

// errProvisionedAckWait is a tool's consumer that the worker may not
// change (provisioned for a worker in an account of its own) with another
// ack wait than the worker's: the worker takes no call from it, since its
// heartbeats would not keep a running call from being redelivered.
var ErrProvisionedAckWait = errors.New("natsbus: the provisioned consumer has another ack wait, which this worker may not change")

// errForeignConsumer is a tool's consumer that is a push consumer: the
// worker takes no call from it.
var ErrForeignConsumer = errors.New("natsbus: the consumer is not a pull consumer")
