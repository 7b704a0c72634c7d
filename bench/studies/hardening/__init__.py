"""A victim's stream under attack (`stall`) and server memory under floods (`memory_flood`),
measured from outside a server run as a child process."""
