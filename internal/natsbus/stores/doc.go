// Package stores holds what the fleet keeps in JetStream, each behind a
// type or function named for it: the start and claim records of
// non-idempotent calls ([RecordRoutes], [WriteStart]), the run journals
// ([OpenJournal], [ReadJournal], [ListJournals], [WatchJournal]), the
// agents bucket ([AgentStore]), the approvals stream ([ApprovalLedger]),
// the catalog of tool specs ([Catalog], [PublishSpecs]), the runs queue
// and results bucket ([RunResults], [EnsureRunsConsumer]), a bucket's
// live view ([WatchKeys]), and what a role that only reads sees of them
// ([ReadJournalFrom], [BucketValues]).
package stores
