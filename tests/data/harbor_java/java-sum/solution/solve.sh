#!/bin/bash
cd /app && javac Sum.java && java Sum numbers.txt > /app/out.txt
