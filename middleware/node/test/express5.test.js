'use strict';
require('./checks').checks('express5');
