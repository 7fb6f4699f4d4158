package deploy_test

import "github.com/toolfleet/toolfleet/deploy"

// The tests of package deploy run the images' coordinator as an operator
// does.
func init() { deploy.ImageBinaries = imageBinaries }
