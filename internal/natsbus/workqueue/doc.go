// Package workqueue is a pull consumer of a JetStream work queue that
// never holds more messages than it has free slots (a buffered message's
// ack timer would run while nobody works on it) and settles each message
// once, as its [WorkHandler] decides ([Decision]).
package workqueue
