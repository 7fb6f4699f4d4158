package embedded

import (
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The users of a fleet's listening embedded server ([FleetUsers]): the
// roles of deploy/nats-server.conf, with the same names.
const (
	// RoleCoordinator is the coordinator's own user: it connects in
	// process only and its password, drawn at start, never leaves the
	// process. It may do everything but decide approvals or erase the
	// approvals stream.
	RoleCoordinator = "coordinator"
	// RoleWorker is the user of remote toolworkers.
	RoleWorker = "worker"
	// RoleClient is the user of clients submitting runs, on their own
	// subject (<prefix>.run.submit.client).
	RoleClient = "client"
	// RoleOperator is the user of the human who approves calls: the only
	// user that may publish approval decisions.
	RoleOperator = "operator"
)

// FleetUsers returns the users of a fleet's listening embedded server for
// subjects s, each with the permissions of its role in
// deploy/nats-server.conf; [RoleCoordinator] comes first (the in-process
// user, which must ask with the inbox prefix _INBOX_coordinator: workers
// answer discovery requests on the coordinator's and the operator's inboxes
// only). password gives a role's password, "" to draw one at start. The
// operator is included only when password gives it one: its password must
// reach the operator from outside the fleet (an environment variable the
// process takes out of its environment), since anything the fleet writes
// is readable by the tools it runs.
func FleetUsers(s protocol.Subjects, password func(role string) string) []User {
	if password == nil {
		password = func(string) string { return "" }
	}
	p := strings.TrimSuffix(s.Calls(), ".call.>")
	calls, approvals := s.CallsStream(), s.ApprovalsStream()
	tools, runs := s.CatalogBucket(), s.RunsBucket()
	users := []User{
		{Name: RoleCoordinator, Password: password(RoleCoordinator), Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{
				s.ApprovalDecisions(),
				"$JS.API.STREAM.DELETE." + approvals,
				"$JS.API.STREAM.PURGE." + approvals,
				"$JS.API.STREAM.MSG.DELETE." + approvals,
			}},
			// No interest on the audit log's subjects: a push consumer
			// delivering there would copy messages into it.
			Subscribe: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{s.Approvals()}},
		}},
		{Name: RoleWorker, Password: password(RoleWorker), Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				s.Results(),
				p + ".progress.>",
				"$JS.API.INFO",
				"$JS.API.STREAM.INFO." + calls,
				"$JS.API.STREAM.INFO." + s.ResultsStream(),
				"$JS.API.STREAM.INFO." + approvals,
				"$JS.API.STREAM.INFO.KV_" + tools,
				"$JS.API.CONSUMER.CREATE." + calls + ".*." + p + ".call.*",
				"$JS.API.CONSUMER.INFO." + calls + ".*",
				"$JS.API.CONSUMER.MSG.NEXT." + calls + ".*",
				"$JS.ACK." + calls + ".>",
				"$JS.API.STREAM.MSG.DELETE." + calls,
				"$KV." + tools + ".>",
				"$JS.API.DIRECT.GET.KV_" + tools + ".>",
				"$JS.API.DIRECT.GET." + approvals,
				"$JS.API.STREAM.MSG.GET." + approvals,
				// discovery answers, on the requesters' own inboxes only
				"_INBOX_" + RoleCoordinator + ".>",
				"_INBOX_" + RoleOperator + ".>",
			}, Deny: []string{s.Approvals()}},
			Subscribe: &server.SubjectPermission{Allow: []string{
				s.Cancels(),
				"_INBOX_" + RoleWorker + ".>",
				"$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.*.toolworker", "$SRV.*.toolworker.*",
				s.ToolInfos(),
			}, Deny: []string{s.Approvals()}},
		}},
		{Name: RoleClient, Password: password(RoleClient), Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				p + ".run.submit." + RoleClient + ".>",
				"$JS.API.INFO",
				"$JS.API.STREAM.INFO.KV_" + runs,
				"$JS.API.DIRECT.GET.KV_" + runs + ".$KV." + runs + "." + RoleClient + ".>",
				"$JS.API.CONSUMER.CREATE.KV_" + runs + ".*.$KV." + runs + "." + RoleClient + ".>",
				"$JS.API.CONSUMER.DELETE.KV_" + runs + ".*",
				"$JS.FC.KV_" + runs + ".>",
			}},
			Subscribe: &server.SubjectPermission{Allow: []string{
				p + ".run.result." + RoleClient + ".>",
				p + ".run.progress." + RoleClient + ".>",
				"_INBOX_" + RoleClient + ".>",
			}},
		}},
	}
	if pw := password(RoleOperator); pw != "" {
		journal := s.JournalStream()
		users = append(users, User{Name: RoleOperator, Password: pw, Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				s.ApprovalDecisions(),
				p + ".journal.cancel.>",
				"$JS.API.STREAM.INFO." + journal,
				"$JS.API.STREAM.MSG.GET." + journal,
				"$JS.API.DIRECT.GET." + journal,
				"$JS.API.DIRECT.GET." + journal + ".>",
				"$JS.API.CONSUMER.CREATE." + journal + ".>",
				"$JS.API.CONSUMER.DELETE." + journal + ".>",
				"$JS.API.CONSUMER.MSG.NEXT." + journal + ".>",
				"$JS.API.STREAM.INFO.KV_" + runs,
				"$JS.API.DIRECT.GET.KV_" + runs + ".>",
				"$JS.API.INFO",
				"$JS.API.STREAM.NAMES",
				"$JS.API.STREAM.LIST",
				"$JS.API.STREAM.INFO." + approvals,
				"$JS.API.STREAM.MSG.GET." + approvals,
				"$JS.API.DIRECT.GET." + approvals,
				"$JS.API.DIRECT.GET." + approvals + ".>",
				"$JS.API.CONSUMER.CREATE." + approvals + ".>",
				"$JS.API.CONSUMER.INFO." + approvals + ".>",
				"$JS.API.CONSUMER.DELETE." + approvals + ".>",
				"$JS.API.CONSUMER.MSG.NEXT." + approvals + ".>",
				"$JS.ACK." + approvals + ".>",
				"$JS.FC." + approvals + ".>",
				"$SRV.>",
			}},
			Subscribe: &server.SubjectPermission{Allow: []string{
				s.Approvals(),
				"_INBOX_" + RoleOperator + ".>",
			}},
		}})
	}
	return users
}
