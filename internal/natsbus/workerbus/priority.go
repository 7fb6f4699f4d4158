package workerbus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// batchQueue is the queue of tc's batch calls, behind tc.gate.
func (w *Worker) batchQueue(tc *toolConsumer) *workqueue.WorkQueue {
	return workqueue.NewWorkQueue(workqueue.WorkQueueConfig{
		Slots: w.sem, Settling: w.settling, MaxFetchBatch: w.cfg.MaxFetchBatch, PollWait: w.cfg.PollWait, InFlight: &w.inflight,
		Logger: w.log.With().Str(natsbus.LogTool, string(tc.name)).Logger(), Noun: "batch calls",
		Ensure: func(ctx context.Context) (jetstream.Consumer, error) { return w.ensureConsumer(ctx, tc.batchConfig) },
		Wait:   w.cfg.Guard.Wait,
		Gate:   tc.gate,
		// Batch calls can wait: the queue holds no slot while idle.
		IdlePoll: admission.BatchIdlePoll,
	}, func(ctx context.Context, d *workqueue.Delivery) workqueue.Decision { return w.process(ctx, tc, d) })
}

// classConsumerConfigs are the durable consumers of tool's interactive and
// batch calls that every worker serving tool shares.
func classConsumerConfigs(s protocol.Subjects, tool protocol.ToolName, cfg WorkerConfig) (interactive, batch jetstream.ConsumerConfig, err error) {
	for _, c := range []struct {
		class protocol.Class
		into  *jetstream.ConsumerConfig
	}{{protocol.ClassInteractive, &interactive}, {protocol.ClassBatch, &batch}} {
		durable, err := s.ClassConsumer(tool, c.class)
		if err != nil {
			return interactive, batch, err
		}
		filter, err := s.CallsOf(tool, c.class)
		if err != nil {
			return interactive, batch, err
		}
		*c.into = toolConsumerConfig(durable, tool, filter, cfg)
		if c.class == protocol.ClassBatch {
			c.into.Description = "toolfleet workers serving " + string(tool) + ": batch calls"
		}
	}
	return interactive, batch, nil
}
