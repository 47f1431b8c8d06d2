#!/bin/bash
echo 0.5 > /logs/verifier/reward.txt
