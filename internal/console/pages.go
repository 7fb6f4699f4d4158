package console

import "strings"

// page is one of the console's pages: its template
// (templates/<name>.html) and script (assets/<name>.js), and its title.
type page struct {
	name, title string
	// Nav says whether the page has the navigation bar; the login page has none.
	Nav bool
}

// Title is the page's title.
func (p page) Title() string { return p.title }

// Script is the path of the page's script.
func (p page) Script() string { return "/assets/" + p.name + ".js" }

// Name is the page's name, the body's data-page.
func (p page) Name() string { return p.name }

// pages are the console's pages, in the order of the navigation bar.
var pages = []page{
	{name: "fleet", title: "Fleet", Nav: true},
	{name: "runs", title: "Runs", Nav: true},
	{name: "run", title: "Run", Nav: true},
	{name: "approvals", title: "Approvals", Nav: true},
	{name: "tools", title: "Tools", Nav: true},
	{name: "login", title: "Log in"},
}

// pageOf names the page of a path: / the fleet, /runs, /runs/{id} (a
// run's page reads its id from the path), /approvals, /tools, /login.
func pageOf(path string) (string, bool) {
	switch path {
	case "/":
		return "fleet", true
	case "/runs", "/approvals", "/tools", "/login":
		return path[1:], true
	}
	if id, ok := strings.CutPrefix(path, "/runs/"); ok && id != "" && !strings.Contains(id, "/") {
		return "run", true
	}
	return "", false
}
