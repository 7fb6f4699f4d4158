#!/bin/sh
# Prints a .env file for docker compose with a fresh random password for
# each NATS user of nats-server.conf:
#
#   ./gen-env.sh > .env
#
# Passwords start with letters: nats-server reads an environment value as a
# configuration value, so one that looks like a number or a size would break
# the configuration.
set -eu
for user in ADMIN COORDINATOR WORKER WORKER_DEPLOY LEAF OPERATOR VIEWER CLIENT; do
  printf 'TOOLFLEET_%s_PASSWORD=tf-%s\n' "$user" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
done
