// Package admission decides whether a tool call may go now: the
// fleet-wide rate limit of each tool ([ToolTraffic], [RateLimiter]), the
// pause of a tool's consumer, the priority of a tool's interactive calls
// over its batch calls ([ClassGate]), a run's route to its client's share
// ([Route]) and the rate of a call's progress reports. Workers and
// coordinators both use it; it depends on nothing of theirs.
package admission
