'use strict';
require('./checks').checks('express4');
