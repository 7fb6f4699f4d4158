package embedded

import (
	"crypto/rand"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The accounts and users of a fleet's listening embedded server
// ([FleetAccounts]): those of deploy/nats-server.conf, with the same names.
const (
	// FleetAccount is the fleet's account: its streams and buckets, the
	// coordinator, workers and operator.
	FleetAccount = "FLEET"
	// RoleCoordinator is the coordinator's own user: it connects in
	// process only and its password, drawn at start, never leaves the
	// process. Its in-process workers share its connection. It may do
	// everything but decide approvals or erase the approvals stream.
	RoleCoordinator = "coordinator"
	// RoleWorker is the user of remote toolworkers.
	RoleWorker = "worker"
	// RoleClient is the user of clients submitting runs, on their own
	// subject (<prefix>.run.submit.client), and the name of its account.
	RoleClient = "client"
	// RoleOperator is the user of the human who approves calls: the only
	// user that may publish approval decisions.
	RoleOperator = "operator"
	// RoleViewer is the user of a human who only looks, in an account of
	// its own ([ViewerAccount]): it reads runs, approvals, tools, traffic
	// records and agents, creates no consumer and changes nothing.
	RoleViewer = "viewer"
	// ViewerAccount is the viewer's account: it imports from
	// [FleetAccount] only the reads the console makes.
	ViewerAccount = "VIEWER"
)

// FleetAccounts returns the accounts of a fleet's listening embedded
// server for subjects s, those of deploy/nats-server.conf: [FleetAccount]
// with the fleet's users, the client's account ([RoleClient]), which
// imports only its own submissions, reads of its own results and its own
// runs' results and progress, and the viewer's ([ViewerAccount]), which
// imports only the reads the console makes. Each user has the permissions
// of its role in deploy/nats-server.conf; [RoleCoordinator] comes first
// (the in-process user, which must ask with the inbox prefix
// _INBOX_coordinator: workers answer discovery requests on the
// coordinator's and the operator's inboxes only). password gives a role's
// password, "" to draw one at start. The operator and the viewer (and its
// account) are included only
// when password gives them one: their passwords must reach them from
// outside the fleet (an environment variable the process takes out of its
// environment), since anything the fleet writes is readable by the tools
// it runs.
func FleetAccounts(s protocol.Subjects, password func(role string) string) []Account {
	p := strings.TrimSuffix(s.Calls(), ".call.>")
	users, client := fleetUsers(s, password)
	runs := "$JS.API.DIRECT.GET.KV_" + s.RunsBucket() + ".$KV." + s.RunsBucket() + "."
	fleet := Account{Name: FleetAccount, JetStream: true, Users: users, Exports: []Export{
		// the client token (4 and 8) must be the importer's name
		{Subject: p + ".run.submit.*.>", AccountTokenPosition: 4},
		{Subject: runs + "*.>", AccountTokenPosition: 8},
		{Subject: p + ".run.result.*.>", Stream: true, AccountTokenPosition: 4},
		{Subject: p + ".run.progress.*.>", Stream: true, AccountTokenPosition: 4},
		{Subject: p + ".run.input.*.>", AccountTokenPosition: 4},
	}}
	accounts := []Account{
		fleet,
		{Name: RoleClient, Users: []User{client}, Imports: []Import{
			{Account: FleetAccount, Subject: p + ".run.submit." + RoleClient + ".>"},
			{Account: FleetAccount, Subject: runs + RoleClient + ".>"},
			{Account: FleetAccount, Subject: p + ".run.result." + RoleClient + ".>", Stream: true},
			{Account: FleetAccount, Subject: p + ".run.progress." + RoleClient + ".>", Stream: true},
			{Account: FleetAccount, Subject: p + ".run.input." + RoleClient + ".>"},
		}},
	}
	if pw := password(RoleViewer); pw != "" {
		reads := viewerReads(s)
		for _, r := range reads {
			accounts[0].Exports = append(accounts[0].Exports, Export{Subject: r.subject, Accounts: []string{ViewerAccount}, ResponseStream: r.batched})
		}
		accounts[0].Exports = append(accounts[0].Exports, Export{Subject: p + ".run.progress.*.*", Stream: true, Accounts: []string{ViewerAccount}})
		accounts = append(accounts, viewerAccount(s, pw, reads))
	}
	return accounts
}

// DrawPasswords is a password function for [FleetAccounts] that draws
// every role's password, the operator's included (so the operator is one of
// the users): the accounts of a server whose users all connect from the
// process that started it and learn their passwords from it (pkg/fleettest).
func DrawPasswords(string) string { return "tf-" + rand.Text() }

// fleetUsers returns the users of FleetAccounts, each with its role's
// permissions: those of the fleet's account (coordinator, worker, then the
// operator if it has a password) and the client.
func fleetUsers(s protocol.Subjects, password func(role string) string) (fleet []User, client User) {
	if password == nil {
		password = func(string) string { return "" }
	}
	p := strings.TrimSuffix(s.Calls(), ".call.>")
	calls, approvals, claims, starts := s.CallsStream(), s.ApprovalsStream(), s.ClaimsStream(), s.StartsStream()
	tools, runs, agents := "KV_"+s.CatalogBucket(), "KV_"+s.RunsBucket(), "KV_"+s.AgentsBucket()
	limits := "KV_" + s.LimitsBucket()
	srv := []string{"$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.*.toolworker", "$SRV.*.toolworker.*"}
	users := []User{
		{Name: RoleCoordinator, Password: password(RoleCoordinator), Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				p + ".call.>",
				p + ".cancel.>",
				p + ".approval.request.>",
				p + ".approval.outcome.>",
				s.Results(),
				p + ".progress.>",
				"$KV." + s.CatalogBucket() + ".>",
				"$JS.ACK." + calls + ".>",
				"$JS.API.>",
				"$JS.FC." + tools + ".>",
				"$KV." + s.LimitsBucket() + ".bucket.>",
				p + ".run.result.>",
				p + ".run.progress.>",
				"$KV." + s.RunsBucket() + ".>",
				"$JS.ACK." + s.RunsStream() + ".>",
				p + ".journal.run.>",
				p + ".journal.cancel.>",
				// runs resume: a parked run's request submitted again
				s.RunSubmissions(),
				// withdrawals: a call's start record
				s.Starts(),
				p + ".own.*.start.>",
				// its in-process workers share its connection: an approved
				// call's execution record, written only after the worker
				// has checked the operator's decision itself
				s.Claims(),
				"$SRV.*.toolworker",
				s.ToolInfos(),
			}, Deny: []string{
				s.ApprovalDecisions(),
				// The embedded server has no admin: this coordinator
				// provisions the streams (create and update), but
				// removes none, nor any audit or execution record.
				"$JS.API.STREAM.DELETE.>",
				"$JS.API.STREAM.PURGE.>",
				"$JS.API.STREAM.RESTORE.>",
				"$JS.API.STREAM.SNAPSHOT.>",
				"$JS.API.STREAM.PEER.>",
				"$JS.API.STREAM.LEADER.>",
				"$JS.API.STREAM.MSG.DELETE." + approvals,
				"$JS.API.STREAM.MSG.DELETE." + s.TrafficStream(),
				"$JS.API.STREAM.MSG.DELETE." + claims,
				"$JS.API.STREAM.MSG.DELETE." + starts,
				"$JS.API.STREAM.MSG.DELETE." + s.ResultsStream(),
				"$JS.API.STREAM.MSG.DELETE." + tools,
				"$JS.API.STREAM.MSG.DELETE." + runs,
				"$JS.API.STREAM.MSG.DELETE." + agents,
				"$JS.API.ACCOUNT.>",
				"$JS.API.META.>",
				"$JS.API.SERVER.>",
				// the kill switch of a tool is the operator's
				"$JS.API.CONSUMER.PAUSE.>",
			}},
			// No interest on the audit log's subjects: a push consumer
			// delivering there would copy messages into it.
			Subscribe: &server.SubjectPermission{
				Allow: append([]string{p + ".>", "_INBOX_" + RoleCoordinator + ".>", "$JS.EVENT.ADVISORY.>"}, srv...),
				Deny:  []string{s.Approvals()},
			},
			// discovery answers of its in-process toolworkers
			Response: &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION},
		}},
		{Name: RoleWorker, Password: password(RoleWorker), Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				s.Results(),
				p + ".progress.>",
				"$JS.API.INFO",
				"$JS.API.STREAM.INFO." + calls,
				"$JS.API.STREAM.INFO." + s.ResultsStream(),
				"$JS.API.STREAM.INFO." + approvals,
				"$JS.API.STREAM.INFO." + tools,
				"$JS.API.STREAM.INFO." + claims,
				"$JS.API.STREAM.INFO." + starts,
				// whether a tool has record streams of its own (names only)
				"$JS.API.STREAM.NAMES",
				// each tool's two consumers, on its interactive and batch calls
				"$JS.API.CONSUMER.CREATE." + calls + ".*." + p + ".call.*.interactive.*",
				"$JS.API.CONSUMER.CREATE." + calls + ".*." + p + ".call.*.batch.*",
				"$JS.API.CONSUMER.INFO." + calls + ".*",
				"$JS.API.CONSUMER.MSG.NEXT." + calls + ".*",
				"$JS.ACK." + calls + ".>",
				// claiming a non-idempotent call: its start record
				s.Starts(),
				"$JS.API.STREAM.MSG.GET." + starts,
				"$KV." + s.CatalogBucket() + ".>",
				// read with MSG.GET: the streams a worker writes allow no direct get
				"$JS.API.STREAM.MSG.GET." + tools,
				"$JS.API.DIRECT.GET." + approvals,
				"$JS.API.STREAM.MSG.GET." + approvals,
				s.Claims(),
				"$JS.API.STREAM.MSG.GET." + claims,
				// rate limits: read the operator's, advance the shared buckets
				"$JS.API.STREAM.INFO." + limits,
				"$JS.API.STREAM.MSG.GET." + limits,
				"$KV." + s.LimitsBucket() + ".bucket.>",
				// discovery answers, on the requesters' own inboxes only
				"_INBOX_" + RoleCoordinator + ".>",
				"_INBOX_" + RoleOperator + ".>",
			}, Deny: []string{s.Approvals()}},
			Subscribe: &server.SubjectPermission{
				Allow: append(append([]string{s.Cancels(), "_INBOX_" + RoleWorker + ".>"}, srv...), s.ToolInfos()),
				Deny:  []string{s.Approvals()},
			},
		}},
	}
	client = User{Name: RoleClient, Password: password(RoleClient), Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			p + ".run.submit." + RoleClient + ".>",
			"$JS.API.DIRECT.GET." + runs + ".$KV." + s.RunsBucket() + "." + RoleClient + ".>",
			p + ".run.input." + RoleClient + ".>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			p + ".run.result." + RoleClient + ".>",
			p + ".run.progress." + RoleClient + ".>",
			"_INBOX_" + RoleClient + ".>",
		}},
	}}
	if pw := password(RoleOperator); pw != "" {
		journal, cancels := s.JournalStream(), s.CancelsStream()
		users = append(users, User{Name: RoleOperator, Password: pw, Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				s.ApprovalDecisions(),
				p + ".journal.cancel.>",
				p + ".journal.resume.>",
				"$JS.API.STREAM.INFO." + cancels,
				"$JS.API.STREAM.MSG.GET." + cancels,
				"$JS.API.DIRECT.GET." + cancels + ".>",
				"$JS.API.STREAM.INFO." + journal,
				"$JS.API.STREAM.MSG.GET." + journal,
				"$JS.API.DIRECT.GET." + journal,
				"$JS.API.DIRECT.GET." + journal + ".>",
				"$JS.API.CONSUMER.CREATE." + journal + ".>",
				"$JS.API.CONSUMER.DELETE." + journal + ".>",
				"$JS.API.CONSUMER.MSG.NEXT." + journal + ".>",
				"$JS.API.STREAM.INFO." + runs,
				"$JS.API.DIRECT.GET." + runs + ".>",
				"$JS.API.DIRECT.GET." + runs,
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
				// traffic control: pause a tool's consumer and record it,
				// set its rate limit (coordinator tools)
				s.TrafficNotes(),
				"$JS.API.STREAM.INFO." + s.TrafficStream(),
				"$JS.API.STREAM.MSG.GET." + s.TrafficStream(),
				"$JS.API.CONSUMER.CREATE." + s.TrafficStream() + ".>",
				"$JS.API.CONSUMER.INFO." + s.TrafficStream() + ".>",
				"$JS.API.CONSUMER.DELETE." + s.TrafficStream() + ".>",
				"$JS.API.CONSUMER.MSG.NEXT." + s.TrafficStream() + ".>",
				"$JS.API.CONSUMER.INFO." + calls + ".*",
				"$JS.API.CONSUMER.PAUSE." + calls + ".*",
				"$JS.API.STREAM.INFO." + tools,
				"$JS.API.STREAM.MSG.GET." + tools,
				"$JS.API.STREAM.INFO." + limits,
				"$JS.API.STREAM.MSG.GET." + limits,
				"$KV." + s.LimitsBucket() + ".limit.>",
				// agent definitions
				"$KV." + s.AgentsBucket() + ".>",
				"$JS.API.STREAM.INFO." + agents,
				"$JS.API.DIRECT.GET." + agents,
				"$JS.API.DIRECT.GET." + agents + ".>",
				"$JS.API.STREAM.MSG.GET." + agents,
				"$JS.API.CONSUMER.CREATE." + agents + ".>",
				"$JS.API.CONSUMER.DELETE." + agents + ".>",
				"$JS.FC." + agents + ".>",
				"$SRV.>",
			}},
			Subscribe: &server.SubjectPermission{Allow: []string{
				s.Approvals(),
				"_INBOX_" + RoleOperator + ".>",
				// every run's progress and its calls' starts (the console)
				p + ".run.progress.>",
			}},
		}})
	}
	return users, client
}

// viewerRead is one subject the viewer's account imports from the
// fleet's: a JetStream read, batched when answered with several messages.
type viewerRead struct {
	subject string
	batched bool
}

// viewerReads are what [ViewerAccount] imports: those of
// deploy/nats-server.conf's VIEWER. Direct gets (batched), stream
// information, the tools' consumer information and single gets of the
// streams that allow no direct get; nothing that writes or creates a
// consumer.
func viewerReads(s protocol.Subjects) []viewerRead {
	journal, approvals, traffic := s.JournalStream(), s.ApprovalsStream(), s.TrafficStream()
	runs, agents, limits, tools := "KV_"+s.RunsBucket(), "KV_"+s.AgentsBucket(), "KV_"+s.LimitsBucket(), "KV_"+s.CatalogBucket()
	return []viewerRead{
		{"$JS.API.INFO", false},
		{"$JS.API.STREAM.INFO." + journal, false},
		{"$JS.API.DIRECT.GET." + journal, true},
		{"$JS.API.DIRECT.GET." + runs, true},
		{"$JS.API.STREAM.INFO." + approvals, false},
		{"$JS.API.DIRECT.GET." + approvals, true},
		{"$JS.API.STREAM.INFO." + agents, false},
		{"$JS.API.DIRECT.GET." + agents, true},
		{"$JS.API.STREAM.INFO." + tools, false},
		{"$JS.API.STREAM.MSG.GET." + tools, false},
		{"$JS.API.CONSUMER.INFO." + s.CallsStream() + ".*", false},
		{"$JS.API.STREAM.INFO." + limits, false},
		{"$JS.API.STREAM.MSG.GET." + limits, false},
		{"$JS.API.STREAM.INFO." + traffic, false},
		{"$JS.API.STREAM.MSG.GET." + traffic, false},
	}
}

// viewerAccount is [ViewerAccount] with the user [RoleViewer] (password
// pw), which may ask what the account imports (reads) and the console's
// discovery request, in its own account, where no worker answers, and
// follow every run's progress subject (a stream import).
func viewerAccount(s protocol.Subjects, pw string, reads []viewerRead) Account {
	a := Account{Name: ViewerAccount}
	allow := make([]string, 0, len(reads)+1)
	for _, r := range reads {
		allow = append(allow, r.subject)
		a.Imports = append(a.Imports, Import{Account: FleetAccount, Subject: r.subject})
	}
	allow = append(allow, "$SRV.INFO.toolworker")
	// every client's runs' progress and their calls' starts, live (the
	// console): <client>.<run>, two tokens, so that the export, unlike
	// one of ">", holds no client's own import of <client>.> (the server
	// authorizes an import by the first export that holds it)
	progress := strings.TrimSuffix(s.Calls(), ".call.>") + ".run.progress.*.*"
	a.Imports = append(a.Imports, Import{Account: FleetAccount, Subject: progress, Stream: true})
	a.Users = []User{{Name: RoleViewer, Password: pw, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_" + RoleViewer + ".>", progress}},
	}}}
	return a
}
